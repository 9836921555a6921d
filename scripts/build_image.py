#!/usr/bin/env python3
"""Build the dra-bridge container image as an OCI archive, without a Docker engine and without a registry.

    sudo python3 scripts/build_image.py                       # dist/dra-bridge-<version>.oci.tar
    sudo python3 scripts/build_image.py --out /tmp/img.oci.tar --json
    sudo python3 scripts/build_image.py --refresh-base        # a new Debian base (Debian's security updates)

Then, e.g.: `ctr -n k8s.io images import dist/dra-bridge-0.1.0.oci.tar` (named ghcr.io/dra-bridge/dra-bridge:0.1.0),
`podman load -i ...`, or `skopeo copy oci-archive:dist/dra-bridge-0.1.0.oci.tar:0.1.0 docker://REGISTRY/...`.

A Debian bookworm root filesystem (mmdebstrap: Python 3.11 from Debian) and, in a second layer, image/requirements.lock
and our wheel in /usr/local; `bridge` is the entrypoint, user 65532 the default (the chart runs the node daemon as
root). Reproducible: the same commit and the same cached Debian base give the same image digest. Needs root,
mmdebstrap and umoci (`apt-get install mmdebstrap umoci`); caches under ~/.cache/dra-bridge/image (--cache-dir).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from imagebuild import build, recipe  # noqa: E402
from imagebuild.build import BuildError  # noqa: E402
from imagebuild.debian import BaseError  # noqa: E402
from imagebuild.lockfile import LockError  # noqa: E402
from imagebuild.oci import OciError  # noqa: E402
from imagebuild.pylayer import PyLayerError  # noqa: E402


def main() -> int:
    version = recipe.project().version
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--out", type=Path, default=recipe.ROOT / "dist" / f"dra-bridge-{version}.oci.tar",
                        help="the OCI archive to write (default: dist/dra-bridge-<version>.oci.tar)")
    parser.add_argument("--repository", default=build.DEFAULT_REPOSITORY,
                        help="image name without tag (default: the chart's image.repository)")
    parser.add_argument("--tag", default=None, help="image tag (default: the package version, the chart's appVersion)")
    parser.add_argument("--cache-dir", type=Path, default=recipe.CACHE, help="Debian base, wheels, build tools")
    parser.add_argument("--refresh-base", action="store_true", help="make the Debian base again from the mirror")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    try:
        result = build.build(args.out.resolve(), cache=args.cache_dir, refresh_base=args.refresh_base,
                             repository=args.repository, tag=args.tag, log=log)
    except (BuildError, BaseError, LockError, OciError, PyLayerError) as err:
        print(f"build_image: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in asdict(result).items()}, indent=2))
        return 0
    mib = 1 << 20
    print(f"{result.archive} ({result.archive_bytes / mib:.1f} MiB)")
    print(f"  image    {result.reference}@{result.manifest_digest}")
    print(f"  revision {result.revision}, created {result.created}")
    print(f"  size     {result.compressed_bytes / mib:.1f} MiB compressed, {result.uncompressed_bytes / mib:.1f} MiB "
          "unpacked")
    print(f"  seconds  {result.seconds} ({'new' if result.base_built else 'cached'} Debian base)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
