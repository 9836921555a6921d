"""What goes on the wire for one resource request: the body read (JSON, YAML or protobuf), the answer written (JSON,
protobuf, or a transformation such as `Table`), and watch events, following the negotiation in `negotiation.py`.

The answer is negotiated before the request does anything (the real handlers call NegotiateOutputMediaType first,
so an unacceptable `Accept` never creates an object): `Wire.check()` raises 406 when no acceptable media type can
carry this kind. Then each answer takes the first acceptable choice that fits the object: protobuf when the kind
has a message here (`protobuf.py`), otherwise the next choice (JSON). Errors (`Status`) follow the same rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import negotiation, protobuf
from .negotiation import Choice
from .registry import ResourceType
from .status import ApiError
from .tables import transform

Obj = dict[str, Any]


def _dumps(obj: Obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


@dataclass
class Wire:
    rt: ResourceType
    choices: list[Choice]
    query: dict[str, str]
    describe: Callable[[str, str], str] = lambda d, p: ""
    _table_headers_sent: bool = field(default=False, init=False)

    @classmethod
    def negotiate(cls, rt: ResourceType, accept: str | None, query: dict[str, str],
                  describe: Callable[[str, str], str]) -> Wire:
        return cls(rt, negotiation.choices(accept), query, describe)

    def _fits(self, choice: Choice) -> bool:
        if choice.media == negotiation.PROTOBUF:
            return choice.convert is None and protobuf.encodable(self.rt.group_version, self.rt.kind)
        return True

    def check(self) -> None:
        if not any(self._fits(c) for c in self.choices):
            raise ApiError(406, "NotAcceptable", negotiation.not_acceptable_message())

    def encode(self, code: int, obj: Obj) -> tuple[bytes, str]:
        """Body and Content-Type of an answer."""
        for choice in self.choices:
            if choice.media == negotiation.PROTOBUF:
                if choice.convert is not None:
                    continue
                try:
                    return protobuf.encode(obj), protobuf.CONTENT_TYPE
                except protobuf.NotEncodable:
                    continue
            if choice.convert is not None and code < 300:
                obj = transform(choice.convert, self.rt, obj, self.query, version=choice.convert_version,
                                describe=self.describe)
            return _dumps(obj), negotiation.JSON
        return _dumps(obj), negotiation.JSON  # only reached for errors after check(): say it in JSON

    def watch_media(self) -> Choice:
        for choice in self.choices:
            if self._fits(choice):
                return choice
        return Choice(negotiation.JSON)

    def watch_event(self, choice: Choice, event: Obj) -> bytes:
        """One event of a watch stream in the negotiated form (a chunk's payload)."""
        obj = event.get("object") or {}
        if choice.media == negotiation.PROTOBUF:
            try:
                return protobuf.watch_frame(str(event.get("type", "")), obj)
            except protobuf.NotEncodable:
                pass  # e.g. an ERROR event's Status of a field we lack: fall back to its JSON line
        if choice.convert == "Table" and event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            obj = transform("Table", self.rt, obj, self.query, version=choice.convert_version,
                            headers=not self._table_headers_sent, describe=self.describe)
            self._table_headers_sent = True
            event = dict(event, object=obj)
        elif choice.convert == "PartialObjectMetadata" and event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
            event = dict(event, object=transform("PartialObjectMetadata", self.rt, obj, self.query,
                                                 version=choice.convert_version))
        return _dumps(event) + b"\n"

    @staticmethod
    def watch_content_type(choice: Choice) -> str:
        return (protobuf.CONTENT_TYPE + ";stream=watch") if choice.media == negotiation.PROTOBUF else negotiation.JSON


def decode_body(raw: bytes, content_type: str | None, parse_json: Callable[[bytes], Any]) -> Any:
    """A create/update body (or DeleteOptions) as a dict: protobuf by Content-Type, else JSON/YAML."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media == protobuf.CONTENT_TYPE:
        if not raw:
            raise ApiError(400, "BadRequest", "the request body is empty")
        try:
            return protobuf.decode(raw)
        except protobuf.ProtobufError as err:
            if err.unsupported_kind:
                raise ApiError(415, "UnsupportedMediaType", str(err)) from err
            raise ApiError(400, "BadRequest", str(err)) from err
    return parse_json(raw)
