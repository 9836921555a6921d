"""`application/vnd.kubernetes.protobuf`: decode request bodies and encode answers for the built-in kinds.

kubectl's typed clients and Helm's release storage (Secrets) speak protobuf to the API server. The wire format,
written from kubernetes/apimachinery pkg/runtime/serializer/protobuf/protobuf.go:

* every object is the 4 bytes `k8s\\x00` followed by a `runtime.Unknown` message whose `typeMeta` carries the
  apiVersion and kind and whose `raw` is the object's own message (Pod, SecretList, Status, DeleteOptions, ...);
* a watch stream (`;stream=watch`) is a sequence of frames, each a 4-byte big-endian length and a raw (no envelope)
  `meta.v1.WatchEvent` whose `object.raw` is the enveloped object (protobuf.LengthDelimitedFramer, the raw
  serializer for the frame and the enveloped one for the embedded object: apiserver handlers/watch.go).

The messages come from our own `.proto` files in `proto/k8s/` (the wire facts of k8s.io/api and
k8s.io/apimachinery, with field options saying what Go's JSON does with each field, see proto/k8s/wire.proto).
The rest of the emulator works on JSON-shaped dicts; the conversion follows Go's own round trip through the typed
struct:

* decoding drops a zero scalar unless the field is a Go pointer or has no `omitempty` (`keep_zero`), because Go's
  protobuf encoder writes every non-pointer field and the real server then sees an unset field; flattens `inline`
  fields (Volume.volumeSource); renders `Time` as RFC 3339 seconds and an empty `Time` as unset, `MicroTime` with
  microseconds, `Quantity` as its string, `IntOrString` as an int or a string, `bytes` as base64 and
  `RawExtension`/`FieldsV1` as the JSON they hold;
* encoding is the reverse, and refuses (`NotEncodable`) an object with a key our messages do not have, so the
  handler answers JSON instead (clients that accept protobuf accept JSON too: client-go sends
  `Accept: application/vnd.kubernetes.protobuf,application/json`) rather than silently dropping a field;
* a request body with fields our messages do not know (field numbers left as unknown fields) is refused with 400
  naming the message and the field numbers, never stored with the fields lost.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf import unknown_fields
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from bridge._proto.k8s import wire_pb2
from bridge._proto.k8s.api import core_pb2, events_pb2
from bridge._proto.k8s.apimachinery import meta_pb2, runtime_pb2

Obj = dict[str, Any]
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
_TIME = "k8s.io.apimachinery.pkg.apis.meta.v1.Time"
_MICRO = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime"
_FIELDS = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1"
_QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
_INTSTR = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
_RAW = "k8s.io.apimachinery.pkg.runtime.RawExtension"


class ProtobufError(ValueError):
    """A request body that is not a valid protobuf object of a kind we know: the handler answers 400/415."""

    def __init__(self, message: str, *, unsupported_kind: bool = False) -> None:
        super().__init__(message)
        self.unsupported_kind = unsupported_kind


class NotEncodable(ValueError):
    """The object has no protobuf form here (its kind or one of its fields is not in our messages)."""


_CORE_KINDS = ("Namespace", "Node", "Pod", "Event", "ResourceQuota", "ConfigMap", "Service", "ServiceAccount",
               "Secret")
_BY_TYPE: dict[tuple[str, str], type[Message]] = {}
for _kind in _CORE_KINDS:
    _BY_TYPE[("v1", _kind)] = getattr(core_pb2, _kind)
    _BY_TYPE[("v1", _kind + "List")] = getattr(core_pb2, _kind + "List")
_BY_TYPE[("v1", "Binding")] = core_pb2.Binding
_BY_TYPE[("events.k8s.io/v1", "Event")] = events_pb2.Event
_BY_TYPE[("events.k8s.io/v1", "EventList")] = events_pb2.EventList
# Kinds of meta/v1 registered in every group version (metav1.AddToGroupVersion): any apiVersion.
_ANY_VERSION: dict[str, type[Message]] = {"Status": meta_pb2.Status, "DeleteOptions": meta_pb2.DeleteOptions}


def message_type(api_version: str, kind: str) -> type[Message] | None:
    return _BY_TYPE.get((api_version, kind)) or _ANY_VERSION.get(kind)


def encodable(api_version: str, kind: str) -> bool:
    return message_type(api_version, kind) is not None


# -- descriptor facts (cached per message type) ------------------------------------------------------------------
@dataclass(frozen=True)
class _Field:
    fd: FieldDescriptor
    keep_zero: bool
    inline: bool


@functools.lru_cache(maxsize=None)
def _fields(desc: Descriptor) -> tuple[_Field, ...]:
    out = []
    for fd in desc.fields:
        opts = fd.GetOptions()
        out.append(_Field(fd, bool(opts.Extensions[wire_pb2.keep_zero]), bool(opts.Extensions[wire_pb2.inline])))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _json_keys(desc: Descriptor) -> dict[str, tuple[_Field, ...]]:
    """JSON key -> the path of fields that holds it (two long for a key of an inline message)."""
    out: dict[str, tuple[_Field, ...]] = {}
    for f in _fields(desc):
        if f.inline and f.fd.message_type is not None:
            for key, path in _json_keys(f.fd.message_type).items():
                out.setdefault(key, (f, *path))
        else:
            out[f.fd.name] = (f,)
    return out


def _is_map(fd: FieldDescriptor) -> bool:
    return fd.message_type is not None and fd.message_type.GetOptions().map_entry


def _map_value(fd: FieldDescriptor) -> FieldDescriptor:
    assert fd.message_type is not None
    return fd.message_type.fields_by_name["value"]


def _zero(value: Any) -> bool:
    return value in ("", 0, False, b"") and not isinstance(value, Message)


# -- decode (wire -> JSON dict) ----------------------------------------------------------------------------------
def _check_unknown(msg: Message, path: str) -> None:
    unknown = unknown_fields.UnknownFieldSet(msg)
    if len(unknown):
        numbers = sorted({unknown[i].field_number for i in range(len(unknown))})
        raise ProtobufError(f"{path or msg.DESCRIPTOR.name}: field number(s) {', '.join(map(str, numbers))} of "
                            f"{msg.DESCRIPTOR.full_name} are not known to this server; send the object as JSON")


def _time_text(seconds: int, nanos: int = 0, micro: bool = False) -> str:
    t = datetime.fromtimestamp(seconds, UTC)
    if micro:
        return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos // 1000:06d}Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _message_value(msg: Message, path: str) -> Any:
    """A message field's JSON value; `_OMIT` when Go's JSON would leave it unset."""
    name = msg.DESCRIPTOR.full_name
    if name in (_TIME, _MICRO):
        if not msg.ListFields():  # a zero Time marshals to an empty message
            return _OMIT
        seconds, nanos = getattr(msg, "seconds"), getattr(msg, "nanos")
        return _time_text(seconds, nanos, micro=name == _MICRO)
    if name == _QUANTITY:
        return getattr(msg, "string")
    if name == _INTSTR:
        return getattr(msg, "intVal") if getattr(msg, "type") == 0 else getattr(msg, "strVal")
    if name in (_RAW, _FIELDS):
        raw: bytes = getattr(msg, "raw" if name == _RAW else "Raw")
        if not raw:
            return _OMIT
        if raw.startswith(MAGIC):
            return decode(raw)
        try:
            return json.loads(raw)
        except ValueError as err:
            raise ProtobufError(f"{path}: embedded object is neither protobuf nor JSON") from err
    return to_json(msg, path)


_OMIT = object()


def _scalar(fd: FieldDescriptor, value: Any) -> Any:
    if fd.type == FieldDescriptor.TYPE_BYTES:
        return base64.b64encode(value).decode()
    return value


def to_json(msg: Message, path: str = "") -> Obj:
    _check_unknown(msg, path)
    out: Obj = {}
    for f in _fields(msg.DESCRIPTOR):
        fd = f.fd
        here = f"{path}.{fd.name}" if path else fd.name
        if fd.is_repeated:
            values = getattr(msg, fd.name)
            if not len(values):
                continue
            if _is_map(fd):
                value_fd = _map_value(fd)
                if value_fd.message_type is not None:
                    entries = {k: _message_value(v, f"{here}[{k}]") for k, v in values.items()}
                    out[fd.name] = {k: v for k, v in entries.items() if v is not _OMIT}
                else:
                    out[fd.name] = {k: _scalar(value_fd, v) for k, v in values.items()}
            elif fd.message_type is not None:
                out[fd.name] = [v for i, m in enumerate(values) if (v := _message_value(m, f"{here}[{i}]")) is not _OMIT]
            else:
                out[fd.name] = [_scalar(fd, v) for v in values]
            continue
        if not msg.HasField(fd.name):
            continue
        value = getattr(msg, fd.name)
        if fd.message_type is not None:
            converted = _message_value(value, here)
            if converted is _OMIT:
                continue
            if f.inline and isinstance(converted, dict):
                for k, v in converted.items():
                    out.setdefault(k, v)
            else:
                out[fd.name] = converted
        elif f.keep_zero or not _zero(value):
            out[fd.name] = _scalar(fd, value)
    return out


def decode(raw: bytes) -> Obj:
    """A `k8s\\x00` envelope to the object as JSON (with apiVersion and kind from the envelope)."""
    if not raw.startswith(MAGIC):
        raise ProtobufError("the body is not a Kubernetes protobuf object: it must start with the 4 bytes k8s\\x00")
    unknown = runtime_pb2.Unknown()
    try:
        unknown.ParseFromString(raw[len(MAGIC):])
    except DecodeError as err:
        raise ProtobufError(f"the protobuf envelope (runtime.Unknown) does not parse: {err}") from err
    api_version, kind = unknown.typeMeta.apiVersion, unknown.typeMeta.kind
    if unknown.contentEncoding:
        raise ProtobufError(f"content encoding {unknown.contentEncoding!r} is not supported")
    cls = message_type(api_version, kind)
    if cls is None:
        raise ProtobufError(f"{api_version} {kind} is not available as protobuf on this server; send it as JSON",
                            unsupported_kind=True)
    msg = cls()
    try:
        msg.ParseFromString(unknown.raw)
    except DecodeError as err:
        raise ProtobufError(f"{api_version} {kind}: the protobuf message does not parse: {err}") from err
    return {"apiVersion": api_version, "kind": kind, **to_json(msg, kind)}


# -- encode (JSON dict -> wire) ----------------------------------------------------------------------------------
def _parse_time(text: Any, path: str) -> tuple[int, int]:
    if not isinstance(text, str):
        raise NotEncodable(f"{path}: a time must be a string")
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as err:
        raise NotEncodable(f"{path}: {text!r} is not an RFC 3339 time") from err
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    seconds = int(t.timestamp())
    return seconds, t.microsecond * 1000


def _fill_message(msg: Message, value: Any, path: str) -> None:
    name = msg.DESCRIPTOR.full_name
    if name in (_TIME, _MICRO):
        seconds, nanos = _parse_time(value, path)
        setattr(msg, "seconds", seconds)
        if name == _MICRO and nanos:
            setattr(msg, "nanos", nanos)
    elif name == _QUANTITY:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise NotEncodable(f"{path}: a quantity must be a string or a number")
        setattr(msg, "string", value if isinstance(value, str) else str(value))
    elif name == _INTSTR:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise NotEncodable(f"{path}: must be an integer or a string")
        if isinstance(value, int):
            setattr(msg, "type", 0)
            setattr(msg, "intVal", value)
        else:
            setattr(msg, "type", 1)
            setattr(msg, "strVal", value)
    elif name in (_RAW, _FIELDS):
        setattr(msg, "raw" if name == _RAW else "Raw", json.dumps(value, separators=(",", ":")).encode())
    else:
        if not isinstance(value, dict):
            raise NotEncodable(f"{path}: expected an object")
        from_json(msg, value, path)


def _scalar_value(fd: FieldDescriptor, value: Any, path: str) -> Any:
    t = fd.type
    if t == FieldDescriptor.TYPE_STRING:
        ok = isinstance(value, str)
    elif t == FieldDescriptor.TYPE_BOOL:
        ok = isinstance(value, bool)
    elif t == FieldDescriptor.TYPE_BYTES:
        if not isinstance(value, str):
            raise NotEncodable(f"{path}: bytes must be base64 text")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as err:
            raise NotEncodable(f"{path}: not base64") from err
    elif t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok:
        raise NotEncodable(f"{path}: {type(value).__name__} does not fit a {fd.type} field")
    return value


def from_json(msg: Message, obj: Obj, path: str = "") -> Message:
    keys = _json_keys(msg.DESCRIPTOR)
    for key, value in obj.items():
        if value is None or (not path and key in ("apiVersion", "kind")):
            continue
        here = f"{path}.{key}" if path else key
        route = keys.get(key)
        if route is None:
            raise NotEncodable(f"{here}: no such field in {msg.DESCRIPTOR.full_name}")
        target = msg
        for hop in route[:-1]:
            target = getattr(target, hop.fd.name)
        fd = route[-1].fd
        try:
            if _is_map(fd):
                if not isinstance(value, dict):
                    raise NotEncodable(f"{here}: expected an object")
                field = getattr(target, fd.name)
                value_fd = _map_value(fd)
                for k, v in value.items():
                    if v is None:
                        continue
                    if value_fd.message_type is not None:
                        _fill_message(field[k], v, f"{here}[{k}]")
                    else:
                        field[k] = _scalar_value(value_fd, v, f"{here}[{k}]")
            elif fd.is_repeated:
                if not isinstance(value, list):
                    raise NotEncodable(f"{here}: expected a list")
                field = getattr(target, fd.name)
                for i, v in enumerate(value):
                    if fd.message_type is not None:
                        _fill_message(field.add(), v, f"{here}[{i}]")
                    else:
                        field.append(_scalar_value(fd, v, f"{here}[{i}]"))
            elif fd.message_type is not None:
                sub = getattr(target, fd.name)
                sub.SetInParent()
                _fill_message(sub, value, here)
            else:
                setattr(target, fd.name, _scalar_value(fd, value, here))
        except (TypeError, ValueError, OverflowError) as err:
            if isinstance(err, NotEncodable):
                raise
            raise NotEncodable(f"{here}: {err}") from err
    return msg


def encode(obj: Obj) -> bytes:
    """The object (a dict with apiVersion and kind) in the `k8s\\x00` envelope; NotEncodable when it has no
    protobuf form here."""
    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    cls = message_type(api_version, kind)
    if cls is None:
        raise NotEncodable(f"{api_version} {kind} has no protobuf form on this server")
    msg = from_json(cls(), obj)
    envelope = runtime_pb2.Unknown()
    envelope.typeMeta.apiVersion = api_version
    envelope.typeMeta.kind = kind
    envelope.raw = msg.SerializeToString()
    return MAGIC + envelope.SerializeToString()


def watch_frame(event_type: str, obj: Obj) -> bytes:
    """One frame of a protobuf watch stream: length prefix + raw WatchEvent holding the enveloped object."""
    event = meta_pb2.WatchEvent()
    event.type = event_type
    event.object.raw = encode(obj)
    data = event.SerializeToString()
    return struct.pack(">I", len(data)) + data


def read_watch_frames(data: bytes) -> Iterable[tuple[str, Obj]]:
    """Split a protobuf watch stream (tests and clients of the emulator)."""
    offset = 0
    while offset + 4 <= len(data):
        (size,) = struct.unpack(">I", data[offset:offset + 4])
        event = meta_pb2.WatchEvent()
        event.ParseFromString(data[offset + 4:offset + 4 + size])
        offset += 4 + size
        yield event.type, decode(event.object.raw)
