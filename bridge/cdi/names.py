"""CDI naming rules (container-device-interface SPEC.md and its Go parser), pure.

A fully qualified device name is `<vendor>/<class>=<name>`; `<vendor>/<class>` is the spec's `kind`.

* vendor: starts with a letter, ends with a letter or digit, `[A-Za-z0-9_.-]` in between;
* class: the same alphabet, at most 63 characters (a dot in the class needs cdiVersion >= 0.6.0);
* device name: starts and ends with a letter or digit, `[A-Za-z0-9_.:-]` in between (a leading digit needs
  cdiVersion >= 0.5.0).

A runtime rejects a spec with an invalid name, and with it every device of the file, so names are validated
before anything is written.
"""

from __future__ import annotations

import re

_VENDOR_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CLASS_RE = _VENDOR_RE
_DEVICE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
MAX_CLASS_LEN = 63


class CdiNameError(ValueError):
    """A CDI vendor, class, kind or device name breaks the CDI naming rules."""


def validate_vendor(vendor: str) -> str:
    if not _VENDOR_RE.match(vendor):
        raise CdiNameError(f"invalid CDI vendor {vendor!r}: must start with a letter, end with a letter or digit, "
                           "and contain only letters, digits, '_', '.', '-' (e.g. 'k8s.gpu.dra-bridge.io')")
    return vendor


def validate_class(cls: str) -> str:
    if not _CLASS_RE.match(cls) or len(cls) > MAX_CLASS_LEN:
        raise CdiNameError(f"invalid CDI class {cls!r}: at most {MAX_CLASS_LEN} characters, starting with a letter, "
                           "ending with a letter or digit, only letters, digits, '_', '.', '-' (e.g. 'gpu')")
    return cls


def validate_device_name(name: str) -> str:
    if not _DEVICE_RE.match(name):
        raise CdiNameError(f"invalid CDI device name {name!r}: must start and end with a letter or digit and "
                           "contain only letters, digits, '_', '.', ':', '-' (e.g. 'gpu0')")
    return name


def parse_kind(kind: str) -> tuple[str, str]:
    """`"vendor.com/class"` -> (vendor, class), validated."""
    vendor, sep, cls = kind.partition("/")
    if not sep or "/" in cls:
        raise CdiNameError(f"invalid CDI kind {kind!r}: expected '<vendor>/<class>', e.g. 'nvidia.com/gpu'")
    return validate_vendor(vendor), validate_class(cls)


def validate_kind(kind: str) -> str:
    parse_kind(kind)
    return kind


def qualified_name(kind: str, name: str) -> str:
    """`("nvidia.com/gpu", "0")` -> `"nvidia.com/gpu=0"`, both parts validated."""
    return f"{validate_kind(kind)}={validate_device_name(name)}"


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """`"vendor.com/class=name"` -> (vendor, class, name), validated."""
    kind, sep, name = device.partition("=")
    if not sep:
        raise CdiNameError(f"invalid CDI device {device!r}: expected '<vendor>/<class>=<name>'")
    vendor, cls = parse_kind(kind)
    return vendor, cls, validate_device_name(name)
