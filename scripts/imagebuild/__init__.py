"""Build the dra-bridge container image without a Docker engine or a registry (`scripts/build_image.py`).

    mmdebstrap (Debian bookworm, Python 3.11) ─► base layer    (cached, keyed by the Debian recipe)
    image/requirements.lock + our wheel ─────► app layer     (/usr/local: installed, byte-compiled, smoke-tested)
    umoci ───────────────────────────────────► OCI image layout ─► one OCI archive (dist/dra-bridge-<v>.oci.tar)

Modules by job: `recipe` (every fixed input: Debian suite and packages, platform tags, paths), `lockfile` (the pinned
Python dependencies: read, write, resolve), `debian` (the base root filesystem), `pylayer` (our wheel and the locked
wheels installed into it), `tartree` (deterministic tar archives), `oci` (umoci, labels, the archive, reading an image
back), `build` (the pipeline and its command line).

Reproducible: the same commit and the same Debian base give the same image digest. Every timestamp is the commit
time (SOURCE_DATE_EPOCH), tar entries are sorted with fixed owners, byte code is compiled with
`--invalidation-mode unchecked-hash` (no source mtimes in .pyc files), mmdebstrap removes its logs and caches and the
machine-id, and the wheels are the lock's, checked by hash.
"""
