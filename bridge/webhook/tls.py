"""Server TLS from a certificate and key file, reloaded when they change on disk (no restart).

cert-manager and Kubernetes Secret volumes rotate certificates by swapping files (Secret volumes swap a `..data`
symlink), so the reloader compares `(inode, mtime_ns, size)` of both files, following symlinks, every time a
connection is accepted (a `stat` pair costs microseconds; connections are long-lived keep-alives). New handshakes
use the new certificate; established connections keep theirs. A rotation caught half-way (new cert, old key) fails
to load: the previous context stays in use and the next accept tries again, so a rotation never takes the
webhook down. TLS 1.2 is the floor.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


def _signature(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class ReloadingContext:
    def __init__(self, cert_file: str, key_file: str, on_reload: Callable[[str], None] | None = None) -> None:
        """Raises (OSError / ssl.SSLError) when the files cannot be loaded at start: a webhook without a
        certificate must not start."""
        self.cert_file = cert_file
        self.key_file = key_file
        self._on_reload = on_reload
        self._lock = threading.Lock()
        self._sig = (_signature(cert_file), _signature(key_file))
        self._ctx = server_context(cert_file, key_file)
        self._failed_sig: tuple[object, object] | None = None

    def current(self) -> ssl.SSLContext:
        try:
            sig = (_signature(self.cert_file), _signature(self.key_file))
        except OSError as err:  # mid-rotation: a file briefly missing
            log.warning("TLS files unreadable (%s); keeping the current certificate", err)
            return self._ctx
        if sig == self._sig or sig == self._failed_sig:
            return self._ctx
        with self._lock:
            if sig == self._sig:
                return self._ctx
            try:
                ctx = server_context(self.cert_file, self.key_file)
            except (OSError, ssl.SSLError, ValueError) as err:
                self._failed_sig = sig
                log.warning("TLS reload failed (%s); keeping the current certificate", err)
                if self._on_reload:
                    self._on_reload("failed")
                return self._ctx
            self._ctx, self._sig, self._failed_sig = ctx, sig, None
            log.info("TLS certificate reloaded", extra={"cert": self.cert_file})
            if self._on_reload:
                self._on_reload("ok")
            return ctx
