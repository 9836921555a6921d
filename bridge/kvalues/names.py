"""Kubernetes' name rules (pure): the one validator for every name the bridge puts into a URL path, and the regular
expressions the API emulator validates objects with.

Written from k8s.io/apimachinery pkg/util/validation/validation.go (`IsDNS1123Label`: a namespace name, at most 63
characters; `IsDNS1123Subdomain`: most object names, at most 253) and pkg/api/validation/path/name.go
(`ValidatePathSegmentName`: the rule every name travels under in a request path, whatever its kind: not "." or "..",
no "/" or "%").

Why it matters: `bridge namespace set 'kube-system#' dra` once returned 0 and labelled kube-system, because the
name went into the path unchecked and `#` ended the path there (`?` does the same, `team-a/../kube-system` walks up
to it). So `bridge.kube.api.Resource.path` refuses a namespace that is not a DNS-1123 label and a name that is not
a valid path segment (a namespace's own name included) before any request, and percent-encodes what remains
(`#`, `?`, spaces are legal in some kinds' names, and must reach the server as part of the name); the CLIs check the
stricter rule of the kind they take (a namespace, a node) first, to say so in words.
"""

from __future__ import annotations

import re

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL_RE = re.compile(rf"^{_LABEL}$")
DNS_SUBDOMAIN_RE = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253

DNS_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end "
    "with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start "
    "and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


def label_problem(value: str) -> str:
    """Why `value` is not a DNS-1123 label (a namespace name); "" when it is."""
    if len(value) > DNS_LABEL_MAX:
        return f"must be no more than {DNS_LABEL_MAX} characters"
    return "" if DNS_LABEL_RE.match(value) else DNS_LABEL_MSG


def subdomain_problem(value: str) -> str:
    """Why `value` is not a DNS-1123 subdomain (a node's, a pod's, most objects' name); "" when it is."""
    if len(value) > DNS_SUBDOMAIN_MAX:
        return f"must be no more than {DNS_SUBDOMAIN_MAX} characters"
    return "" if DNS_SUBDOMAIN_RE.match(value) else DNS_SUBDOMAIN_MSG


def path_segment_problem(value: str) -> str:
    """Why `value` cannot be a name in a request path (apimachinery `ValidatePathSegmentName`); "" when it can."""
    if not value:
        return "must not be empty"
    if value in (".", ".."):
        return f"may not be {value!r}"
    for bad in ("/", "%"):
        if bad in value:
            return f"may not contain {bad!r}"
    return ""


__all__ = ["DNS_LABEL_MAX", "DNS_LABEL_MSG", "DNS_LABEL_RE", "DNS_SUBDOMAIN_MAX", "DNS_SUBDOMAIN_MSG",
           "DNS_SUBDOMAIN_RE", "label_problem", "path_segment_problem", "subdomain_problem"]
