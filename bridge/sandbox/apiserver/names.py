"""The name rules of apimachinery's `validation` package, with its exact error texts (the DNS-1123 ones shared with
the client side: bridge.kvalues.names).

Pure functions returning `FieldError`s; `validation.py` and `dra_rules.py` compose them.
"""

from __future__ import annotations

import re

from bridge.kvalues.names import DNS_LABEL_MSG, DNS_LABEL_RE, DNS_SUBDOMAIN_MSG, DNS_SUBDOMAIN_RE

from .status import FieldError

__all__ = ["DNS_LABEL_MSG", "DNS_LABEL_RE", "DNS_SUBDOMAIN_MSG", "DNS_SUBDOMAIN_RE"]  # re-exported for the validators

DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
C_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME_PART_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _semver_re(number: str) -> re.Pattern[str]:
    pre = rf"(?:{number}|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
    build = r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
    return re.compile(rf"^{number}\.{number}\.{number}(?:-({pre}(?:\.{pre})*))?{build}$")


# A version attribute (pkg/apis/resource/validation/validation.go `semverRe`). Through 1.37 a number is
# `(0|[1-9]\d*)`; from 1.38 `(0|[1-9]\d{0,17})`, numeric pre-release identifiers included (so it fits an int64).
SEMVER_RE = _semver_re(r"(?:0|[1-9]\d*)")
SEMVER_18_RE = _semver_re(r"(?:0|[1-9]\d{0,17})")

DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, "
    "and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is "
    "'[a-z]([-a-z0-9]*[a-z0-9])?')"
)
C_IDENTIFIER_MSG = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric "
    "characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for validation is "
    "'[A-Za-z_][A-Za-z0-9_]*')"
)
NAME_PART_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
    "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def dns_label(path: str, value: str, max_len: int = 63) -> list[FieldError]:
    errs = []
    if len(value) > max_len:
        errs.append(FieldError(path, "Invalid value", value, f"must be no more than {max_len} characters"))
    if not DNS_LABEL_RE.match(value):
        errs.append(FieldError(path, "Invalid value", value, DNS_LABEL_MSG))
    return errs


def dns_subdomain(path: str, value: str, max_len: int = 253) -> list[FieldError]:
    errs = []
    if len(value) > max_len:
        errs.append(FieldError(path, "Invalid value", value, f"must be no more than {max_len} characters"))
    if not DNS_SUBDOMAIN_RE.match(value):
        errs.append(FieldError(path, "Invalid value", value, DNS_SUBDOMAIN_MSG))
    return errs


def dns1035_label(path: str, value: str) -> list[FieldError]:
    errs = []
    if len(value) > 63:
        errs.append(FieldError(path, "Invalid value", value, "must be no more than 63 characters"))
    if not DNS1035_RE.match(value):
        errs.append(FieldError(path, "Invalid value", value, DNS1035_MSG))
    return errs


def qualified_label_key(path: str, key: str) -> list[FieldError]:
    """A label/annotation key: optional DNS-subdomain prefix + '/' + name part of at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    errs = []
    if "/" in prefix:
        return [FieldError(path, "Invalid value", key, "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")]
    if key.endswith("/") or (prefix == "" and key.startswith("/")):
        return [FieldError(path, "Invalid value", key, "prefix part must be non-empty" if key.startswith("/") else "name part must be non-empty")]
    if prefix:
        for e in dns_subdomain(path, prefix):
            errs.append(FieldError(path, "Invalid value", key, "prefix part " + e.detail))
    if len(name) > 63:
        errs.append(FieldError(path, "Invalid value", key, "name part must be no more than 63 characters"))
    if not _NAME_PART_RE.match(name):
        errs.append(FieldError(path, "Invalid value", key, NAME_PART_MSG))
    return errs


def label_value(path: str, value: str) -> list[FieldError]:
    errs = []
    if len(value) > 63:
        errs.append(FieldError(path, "Invalid value", value, "must be no more than 63 characters"))
    if not _LABEL_VALUE_RE.match(value):
        errs.append(FieldError(path, "Invalid value", value, LABEL_VALUE_MSG))
    return errs


def qualified_device_name(path: str, name: str, *, one_slash: bool = False) -> list[FieldError]:
    """Attribute/capacity names: C identifier of at most 32 characters, optionally `domain/` (DNS subdomain <= 63)
    (pkg/apis/resource/validation/validation.go `validateQualifiedName`). A name with more than one slash: through
    1.37 the real function's `strings.Split` gives three parts, which no case of its switch handles, so the name is
    accepted (seen on kube-apiserver v1.37.2: `example.com/a/b` is stored); from 1.38 (`one_slash`) it is refused
    (`SplitN(name, "/", 3)` and a default case)."""
    if name.count("/") > 1:
        return [FieldError(path, "Invalid value", name, "must not contain more than one slash")] if one_slash else []
    domain, sep, ident = name.partition("/")
    if not sep:
        domain, ident = "", name
    errs = []
    if sep:
        if not domain:
            errs.append(FieldError(path, "Invalid value", "", "the domain must not be empty"))
        else:
            if len(domain) > 63:
                errs.append(FieldError(path, "Too long", detail="may not be more than 63 bytes"))
            if not DNS_SUBDOMAIN_RE.match(domain):
                errs.append(FieldError(path, "Invalid value", domain, DNS_SUBDOMAIN_MSG))
    if sep and not ident:
        errs.append(FieldError(path, "Invalid value", "", "the name must not be empty"))
        return errs
    if len(ident) > 32:
        errs.append(FieldError(path, "Too long", detail="may not be more than 32 bytes"))
    if not C_IDENTIFIER_RE.match(ident):
        errs.append(FieldError(path, "Invalid value", ident, C_IDENTIFIER_MSG))
    return errs


def is_qualified_name(value: str) -> bool:
    return not qualified_label_key("", value)


def is_extended_resource_name(name: str) -> bool:
    """k8s.io/kubernetes pkg/apis/core/v1/helper `IsExtendedResourceName`: has a domain that is not
    `kubernetes.io/`-prefixed (those are native), does not start with `requests.`, and `requests.<name>` is a
    qualified name (so it can be a quota key). Note: `deviceclass.resource.kubernetes.io/<class>` is *not* one; the
    scheduler accepts it separately (pkg/scheduler/util `IsDRAExtendedResourceName`)."""
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    return is_qualified_name("requests." + name)


def extended_resource_name(path: str, value: str) -> list[FieldError]:
    if is_extended_resource_name(value):
        return []
    return [FieldError(path, "Invalid value", value, "must be a valid extended resource name")]
