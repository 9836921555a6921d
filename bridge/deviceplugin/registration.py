"""Registering with the kubelet, and noticing when the kubelet restarts.

Detection choice: a stat poll (default every 100 ms) of `kubelet.sock`'s identity (inode + ctime) and of our own
socket's existence, rather than inotify through ctypes. Reasons:
* kubelet restarts are rare and a 100 ms poll of two `lstat` calls costs nothing measurable, while still
  re-registering far inside the 2 s target;
* it needs no extra fd and no ctypes bindings, and it cannot lose events: inotify can overflow its queue, and a
  watch on a directory that is itself replaced (hostPath re-mounted, directory re-created) silently stops firing,
  whereas a poll always compares the current state with the state we registered against;
* the poll runs on the plugin's one supervisor thread, which also drives registration retries, so there is
  exactly one thread per plugin no matter how many restarts happen.
Identity (`bridge.unixsock.socket_identity`) includes ctime because a deleted inode number may be reused at once
by the re-created `kubelet.sock`.
"""

from __future__ import annotations

import re

import grpc

from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2 as pb
from bridge._proto.deviceplugin.v1beta1 import deviceplugin_pb2_grpc as pb_grpc
from bridge.unixsock import unix_target

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_extended_resource_name(name: str) -> bool:
    """Kubernetes' IsExtendedResourceName: domain-prefixed, not in the kubernetes.io namespace, not `requests.`
    prefixed, and `requests.<name>` must be a valid qualified name."""
    prefix, sep, short = name.partition("/")
    if not sep or not prefix or not short:
        return False
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io") or name.startswith("requests."):
        return False
    if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
        return False
    return len(short) <= 63 and bool(_QUALIFIED_NAME.match(short))


class RegistrationError(RuntimeError):
    """The kubelet rejected or did not answer our Register call."""


def register(
    kubelet_socket: str, endpoint: str, resource_name: str, options: pb.DevicePluginOptions, timeout: float
) -> None:
    """Call `Register` on the kubelet's registration socket; raise RegistrationError on any failure.

    The channel is closed before returning, so repeated attempts leak neither fds nor threads."""
    request = pb.RegisterRequest(version=API_VERSION, endpoint=endpoint, resource_name=resource_name, options=options)
    channel = grpc.insecure_channel(unix_target(kubelet_socket))
    try:
        pb_grpc.RegistrationStub(channel).Register(request, timeout=timeout)
    except grpc.RpcError as err:
        code = err.code() if isinstance(err, grpc.Call) else None
        details = err.details() if isinstance(err, grpc.Call) else str(err)
        raise RegistrationError(f"Register with {kubelet_socket} failed: {code}: {details}") from err
    finally:
        channel.close()
