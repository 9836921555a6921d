"""Build the dra-bridge container image without a Docker engine or a registry (`scripts/build_image.py`).

    mmdebstrap (Debian bookworm, Python 3.11) ─► layer 1: the Debian base  (cached, keyed by the Debian recipe)
    image/requirements.lock ─────────────────► layer 2: the dependencies (/usr/local, byte-compiled)
    our wheel ───────────────────────────────► layer 3: dra-bridge       (/usr/local; smoke-tested in a chroot)
    umoci ───────────────────────────────────► OCI image layout ─► one OCI archive (dist/dra-bridge-<v>.oci.tar)

Modules by job: `recipe` (every fixed input: Debian suite and packages, platform tags, paths), `lockfile` (the pinned
Python dependencies: read, write, resolve), `debian` (the base root filesystem), `pylayer` (our wheel and the locked
wheels installed into it), `tartree` (deterministic tar archives), `oci` (umoci, labels, the archive, reading an image
back), `build` (the pipeline; `scripts/build_image.py` is its command line).

Reproducible: the same commit and the same Debian base give the same image digest. The Python layers, the config
and the history carry the commit time (SOURCE_DATE_EPOCH, by default HEAD's commit time), the Debian base the
recipe's fixed epoch; tar entries are sorted with fixed owners, byte code is compiled with
`--invalidation-mode unchecked-hash` (no source mtimes in .pyc files), mmdebstrap removes its logs and caches and the
machine-id, and the wheels are the lock's, checked by hash.
"""
