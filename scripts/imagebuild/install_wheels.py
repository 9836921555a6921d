"""Install wheels into the image's root filesystem with pypa's `installer` (run by the build virtualenv's Python).

    python install_wheels.py ROOT INTERPRETER PREFIX SITE_PACKAGES WHEEL...

Why not pip: pip writes console scripts with its own interpreter in the shebang, records where each wheel came from
(direct_url.json, a build-machine path) and can only target the running interpreter. `installer` writes scripts for
INTERPRETER (the image's /usr/bin/python3) into ROOT as though ROOT were "/", and adds nothing but RECORD and
INSTALLER to each .dist-info. No byte code here: the build compiles in the image's own Python afterwards.
"""

from __future__ import annotations

import sys

# Only in the build virtualenv (image/build-requirements.lock), not in the development one.
from installer import install  # type: ignore[import-not-found]
from installer.destinations import SchemeDictionaryDestination  # type: ignore[import-not-found]
from installer.sources import WheelFile  # type: ignore[import-not-found]


def main(argv: list[str]) -> None:
    root, interpreter, prefix, site, *wheels = argv
    scheme = {"purelib": site, "platlib": site, "scripts": f"{prefix}/bin", "headers": f"{prefix}/include",
              "data": prefix}
    dest = SchemeDictionaryDestination(scheme, interpreter=interpreter, script_kind="posix", destdir=root)
    for wheel in wheels:
        with WheelFile.open(wheel) as source:
            install(source, dest, additional_metadata={"INSTALLER": b"dra-bridge scripts/build_image.py\n"})


if __name__ == "__main__":
    main(sys.argv[1:])
