"""Content negotiation: which media type (and which transformation) a request's `Accept` header asks for.

Written from kubernetes/apiserver pkg/endpoints/handlers/negotiation/negotiate.go (`NegotiateMediaTypeOptions`):
the clauses of `Accept` are ordered by q, then by specificity (goautoneg: a concrete type before `*`, a concrete
subtype before `*`), and the first clause that one of the serializers (JSON, YAML, protobuf, in that order, so
`*/*` means JSON) can satisfy wins. Clause parameters: `as`/`g`/`v` ask for a transformation, allowed only for
`Table` (JSON or YAML only: RequestScope.AllowsMediaTypeTransform in handlers/rest.go) and
`PartialObjectMetadata[List]`, both in `meta.k8s.io` v1 or v1beta1; `stream=watch` for watches; anything else
unrecognised is ignored. No `Accept` at all means JSON; nothing acceptable is 406 Not Acceptable.

Not produced here (documented limits): YAML (a clause asking only for YAML is skipped, so a YAML-only client gets
406) and the metadata transformations in protobuf (`PartialObjectMetadata` is answered in JSON only).
"""

from __future__ import annotations

from dataclasses import dataclass

JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
SERVED = (JSON, PROTOBUF)  # in the real server's order of preference for */*
_META_GROUP = "meta.k8s.io"


@dataclass(frozen=True)
class Choice:
    """One acceptable answer: a media type, and an optional transformation (`Table`, `PartialObjectMetadata`,
    `PartialObjectMetadataList`) in `meta.k8s.io/<convert_version>`."""

    media: str
    convert: str | None = None
    convert_version: str = "v1"
    stream: bool = False


@dataclass(frozen=True)
class _Clause:
    type: str
    subtype: str
    q: float
    params: dict[str, str]


def _parse(header: str) -> list[_Clause]:
    out = []
    for raw in header.split(","):
        parts = [p.strip() for p in raw.split(";")]
        if not parts[0]:
            continue
        full = parts[0].lower()
        typ, _, sub = full.partition("/")
        params: dict[str, str] = {}
        q = 1.0
        for p in parts[1:]:
            key, _, value = p.partition("=")
            key, value = key.strip(), value.strip().strip('"')
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
            elif key:
                params[key] = value
        out.append(_Clause(typ, sub or "*", q, params))
    # goautoneg: higher q first, then concrete before wildcard; Python's sort keeps the header order otherwise.
    out.sort(key=lambda c: (-c.q, c.type == "*", c.subtype == "*"))
    return [c for c in out if c.q > 0]


def choices(header: str | None, *, served: tuple[str, ...] = SERVED) -> list[Choice]:
    """Every acceptable answer in preference order; empty means 406. `served` lists the media types this endpoint
    can produce (in the server's own order of preference)."""
    if not header or not header.strip():
        return [Choice(served[0])]
    out: list[Choice] = []
    for clause in _parse(header):
        for media in served:
            typ, sub = media.split("/")
            if not (clause.type == "*" or (clause.type == typ and clause.subtype in ("*", sub))):
                continue
            choice = _accept(clause.params, media)
            if choice is not None and choice not in out:
                out.append(choice)
    return out


def _accept(params: dict[str, str], media: str) -> Choice | None:
    convert = params.get("as")
    group, version = params.get("g", ""), params.get("v", "")
    stream = params.get("stream", "")
    if stream and stream != "watch":
        return None
    if convert is None and not group and not version:
        return Choice(media, stream=bool(stream))
    if group != _META_GROUP or version not in ("v1", "v1beta1"):
        return None
    if convert == "Table":
        if media != JSON:  # Table is rendered in JSON or YAML only
            return None
        return Choice(media, "Table", version, bool(stream))
    if convert in ("PartialObjectMetadata", "PartialObjectMetadataList") and media == JSON:
        return Choice(media, convert, version, bool(stream))
    return None


def not_acceptable_message(served: tuple[str, ...] = SERVED) -> str:
    return "only the following media types are accepted: " + ", ".join(served)
