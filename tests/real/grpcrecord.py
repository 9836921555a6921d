"""What the node daemon sees from its kubelet, call by call: a test-only launcher that runs `bridge` with a gRPC server
interceptor on every server the daemon starts (device plugin, DRA plugin, DRA registration), writing one JSON line
per call to `$BRIDGE_TEST_GRPC_RECORD/<node name>.jsonl`.

    BRIDGE_TEST_GRPC_RECORD=/tmp/rec python -m tests.real.grpcrecord node --node-name node-0 ...

Each line: `t` (wall-clock seconds when the call came, comparable with the test's own `time.time()`), `method`
(the full gRPC method name), `what` (`call` for a unary call; `open`, `send` per message and `end` for a server
stream), `caller` (`kubelet`, or `self` for the daemon's own probes of its sockets), `deadline` (of a call or a
stream: the seconds the caller gave it, None without one), `args` (the request, summarised: counts of device IDs,
claim identities), `code` (the gRPC status the daemon answered, `OK` or the code's name) and `reply`
(the answer, summarised). Nothing of the product changes: the launcher wraps `grpc.server` and
`grpc.insecure_channel` before the daemon uses them, then runs the ordinary CLI.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc

ENV = "BRIDGE_TEST_GRPC_RECORD"
SELF_AGENT = "bridge-node-self"


def _claims(request: Any) -> list[dict[str, str]]:
    return [{"namespace": c.namespace, "name": c.name, "uid": c.uid} for c in request.claims]


def summarise_request(method: str, request: Any) -> Any:
    """The arguments that matter, by method name (the last path element); an empty message is {}."""
    name = method.rsplit("/", 1)[-1]
    if name == "Allocate":
        return {"containers": [len(r.devices_ids) for r in request.container_requests]}
    if name == "GetPreferredAllocation":
        return {"containers": [{"available": len(r.available_deviceIDs), "must_include": len(r.must_include_deviceIDs),
                                "size": r.allocation_size} for r in request.container_requests]}
    if name == "PreStartContainer":
        return {"devices": len(request.devices_ids)}
    if name in ("NodePrepareResources", "NodeUnprepareResources"):
        return {"claims": _claims(request)}
    if name == "NotifyRegistrationStatus":
        return {"registered": request.plugin_registered, "error": request.error}
    return {}


def summarise_reply(method: str, reply: Any) -> Any:
    name = method.rsplit("/", 1)[-1]
    if name == "Allocate":
        return {"containers": [{"cdi": len(r.cdi_devices), "devices": len(r.devices), "envs": len(r.envs),
                                "mounts": len(r.mounts)} for r in reply.container_responses]}
    if name == "GetPreferredAllocation":
        return {"containers": [len(r.deviceIDs) for r in reply.container_responses]}
    if name == "GetDevicePluginOptions":
        return {"pre_start_required": reply.pre_start_required,
                "get_preferred_allocation_available": reply.get_preferred_allocation_available}
    if name == "NodePrepareResources":
        return {uid: {"devices": len(r.devices), "error": r.error} for uid, r in reply.claims.items()}
    if name == "NodeUnprepareResources":
        return {uid: {"error": r.error} for uid, r in reply.claims.items()}
    if name == "GetInfo":
        return {"type": reply.type, "name": reply.name, "versions": list(reply.supported_versions)}
    if name == "ListAndWatch":
        return {"devices": len(reply.devices), "healthy": sum(d.health == "Healthy" for d in reply.devices)}
    return None


class Recorder(grpc.ServerInterceptor):
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, context: Any, **entry: Any) -> None:
        agent = dict(context.invocation_metadata() or ()).get("user-agent", "")
        entry["caller"] = "self" if SELF_AGENT in agent else "kubelet"
        now = time.time()
        t0 = entry.pop("t0", now)
        if entry.get("what") in ("call", "open"):
            remaining = context.time_remaining()
            entry["deadline"] = None if remaining is None else round(remaining + (now - t0), 1)
        line = json.dumps({"t": t0, **entry}, sort_keys=True)
        with self._lock, open(self.path, "a") as f:
            f.write(line + "\n")

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(method, handler.unary_unary),
                                                       handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(self._stream(method, handler.unary_stream),
                                                        handler.request_deserializer, handler.response_serializer)
        return handler

    def _unary(self, method: str, inner: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        def call(request: Any, context: Any) -> Any:
            args, t0 = summarise_request(method, request), time.time()
            try:
                reply = inner(request, context)
            except BaseException:
                self.write(context, method=method, what="call", args=args, code=_code(context, "UNKNOWN"),
                           reply=None, t0=t0)
                raise
            self.write(context, method=method, what="call", args=args, code=_code(context, "OK"),
                       reply=summarise_reply(method, reply), t0=t0)
            return reply
        return call

    def _stream(self, method: str, inner: Callable[[Any, Any], Iterator[Any]]) -> Callable[[Any, Any], Iterator[Any]]:
        def stream(request: Any, context: Any) -> Iterator[Any]:
            self.write(context, method=method, what="open", args=summarise_request(method, request), t0=time.time())
            code = "OK"
            try:
                for reply in inner(request, context):
                    self.write(context, method=method, what="send", reply=summarise_reply(method, reply))
                    yield reply
            except GeneratorExit:
                code = "CANCELLED"
                raise
            except BaseException:
                code = _code(context, "UNKNOWN")
                raise
            finally:
                self.write(context, method=method, what="end", code=code)
        return stream


def _code(context: Any, default: str) -> str:
    try:
        code = context.code()
    except (AttributeError, NotImplementedError):
        return default
    if code is None:
        return default
    return str(getattr(code, "name", code))


def install(path: Path) -> None:
    """Make every `grpc.server` of this process record into `path`, and every channel this process opens say so in
    its user agent (`SELF_AGENT`): the daemon's own probes of its sockets (`/readyz`, `/livez`) are then told apart
    from the kubelet's calls."""
    recorder = Recorder(path)
    original_server, original_channel = grpc.server, grpc.insecure_channel

    def server(*args: Any, **kwargs: Any) -> Any:
        kwargs["interceptors"] = [recorder, *(kwargs.get("interceptors") or ())]
        return original_server(*args, **kwargs)

    def insecure_channel(target: str, options: Any = None, *args: Any, **kwargs: Any) -> Any:
        options = [*(options or ()), ("grpc.primary_user_agent", SELF_AGENT)]
        return original_channel(target, options, *args, **kwargs)

    grpc.server = server
    grpc.insecure_channel = insecure_channel


def _node_name(argv: list[str]) -> str:
    for i, a in enumerate(argv):
        if a == "--node-name" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--node-name="):
            return a.split("=", 1)[1]
    return f"pid-{os.getpid()}"


def main() -> None:
    directory = os.environ.get(ENV)
    if directory:
        install(Path(directory) / f"{_node_name(sys.argv[1:])}.jsonl")
    from bridge.cli import main as bridge_main

    bridge_main()


if __name__ == "__main__":
    main()
