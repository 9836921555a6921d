"""`RestKube`: the one `KubeAPI` implementation, over the official client's `ApiClient` with raw JSON.

Requests go through `ApiClient.param_serialize` (host, auth headers, token refresh hooks from the kubeconfig or
the service account) and `ApiClient.call_api`, which returns the unread urllib3 response. Bodies are decoded with
`json.loads` straight into dicts: the client's model classes are never built (listing 150,000 pods through them
costs minutes and gigabytes; see bench/kube_list_bench.py).

Invariants
* Every failure leaves this module as a `bridge.kube.errors` type, mapped once in `translate.py`.
* Transient failures are retried by `Retrier` per request (one page is one request). Named creates are retried
  after an ambiguous failure; if the retry then meets AlreadyExists, the error says `maybe_ours=True` (the first
  attempt may have landed) and the caller decides, typically by reading the object. `generateName` creates and
  JSON patches are never repeated once the server may have seen them. A DELETE whose retry meets NotFound after an
  ambiguous attempt counts as done. A PUT whose first attempt landed gets Conflict on retry; `update_with_retry`
  re-reads and sees the write.
* A paginated list is one consistent snapshot: when the continue token expires (410) the list restarts from the
  first page (at most 3 times) instead of mixing snapshots.
* A paginated list ends: at most `MAX_LIST_PAGES` pages (10,000: 5 million objects at the usual 500 per page, 30
  times the Kubernetes scalability envelope of 150,000 pods) within `list_deadline` seconds in all (default ten
  request timeouts, at least 120 s), and a `continue` token the server sent before is refused. A server that keeps
  answering with another token (once 2,009 pages in 90 s, until killed) gets a `KubeError` saying which bound it
  hit, with the pages and items read; `--timeout` bounds each request, this the whole list. Informers list through
  here too.
* Items of a list carry `apiVersion` and `kind` (the server omits them in lists), so every object the layer
  returns is self-describing.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, MutableSequence, Sequence
from typing import Any

import urllib3.exceptions
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from bridge.kube import jsonio
from bridge.kube.api import (
    RESOURCE_GROUP,
    Discovery,
    JsonPatch,
    ListSink,
    Obj,
    PatchType,
    Resource,
    ResourceAPI,
)
from bridge.kube.discovery import build_discovery, group_versions, parse_version, pick_resource_version
from bridge.kube.errors import AlreadyExists, Gone, KubeError, NotFound, Unavailable
from bridge.kube.retry import Retrier, RetryPolicy
from bridge.kube.stream import WatchStream
from bridge.kube.translate import error_from_api_exception, error_from_transport, k8s_verb

log = logging.getLogger(__name__)

PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
_LIST_RESTARTS = 3
MAX_LIST_PAGES = 10_000
Query = Sequence[tuple[str, str | int]]


_WARNING = re.compile(r'(\d{3}) \S+ "((?:[^"\\]|\\.)*)"')


def parse_warning_headers(values: Sequence[str]) -> list[str]:
    """The texts of `Warning` response headers (`299 - "text"`, RFC 7234 section 5.5: one or more per header, comma
    separated, `"` and `\\` escaped with a backslash), as kube-apiserver sends admission webhooks' warnings
    (k8s.io/apimachinery pkg/util/net/http.go `ParseWarningHeader`). Anything that does not parse is skipped."""
    out: list[str] = []
    for value in values:
        for _code, text in _WARNING.findall(value):
            out.append(re.sub(r"\\(.)", r"\1", text))
    return out


class _ListBound:
    """The bounds of one paginated list (see the module docstring): pages, total time, no token twice."""

    def __init__(self, label: str, deadline: float, seconds: float, clock: Callable[[], float]) -> None:
        self.label, self.deadline, self.seconds, self.clock = label, deadline, seconds, clock
        self.pages = 0

    def next_page(self, token: str, seen: set[str], items: int) -> None:
        self.pages += 1
        read = f"after {self.pages} pages and {items} items"
        if token in seen:
            raise KubeError(f"list {self.label}: the server sent the same continue token twice ({read}); a list "
                            "must end, so it is not read further")
        seen.add(token)
        if self.pages >= MAX_LIST_PAGES:
            raise KubeError(f"list {self.label}: the server did not end the list within {MAX_LIST_PAGES} pages "
                            f"({read}); it is not read further")
        if self.clock() > self.deadline:
            raise KubeError(f"list {self.label}: not finished within {self.seconds:g} s ({read}); a list is bounded "
                            "in time as a whole, each request by --timeout")


def resource_label(res: Resource, subresource: str | None = None) -> str:
    """How RBAC names a resource: "pods", "resourceslices.resource.k8s.io", "pods/status"."""
    base = f"{res.plural}.{res.group}" if res.group else res.plural
    return f"{base}/{subresource}" if subresource else base


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str | int]]:
    q: list[tuple[str, str | int]] = []
    if label_selector:
        q.append(("labelSelector", label_selector))
    if field_selector:
        q.append(("fieldSelector", field_selector))
    return q


class RestKube:
    """Thread-safe: one instance may be shared by a daemon's threads (urllib3 pools the connections)."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        retrier: Retrier | None = None,
        default_namespace: str = "default",
        source: str = "",
        list_deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = api_client
        self._timeout = timeout
        self._connect_timeout = min(connect_timeout, timeout)
        self._retrier = retrier or Retrier(retry or RetryPolicy())
        self._list_deadline = list_deadline if list_deadline is not None else max(120.0, 10 * timeout)
        self._clock = clock
        self.default_namespace = default_namespace
        self.source = source  # where the configuration came from, for messages ("kubeconfig /x, context y")
        self._resource_api: ResourceAPI | None = None
        self._lock = threading.Lock()

    @property
    def host(self) -> str:
        return str(self._client.configuration.host)

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> RestKube:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- transport -------------------------------------------------------------------------------------------

    def _open(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: Any = None,
        content_type: str | None = None,
        verb: str,
        label: str,
        name: str | None = None,
        read_timeout: float | None = -1.0,
    ) -> Any:
        """Send one request; return the unread urllib3 response of a 2xx answer, raise the mapped error else."""
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        _, url, hdrs, _, _ = self._client.param_serialize(
            method, path, query_params=list(query), header_params=headers, auth_settings=["BearerToken"]
        )
        rt = self._timeout if read_timeout == -1.0 else read_timeout
        try:
            r = self._client.call_api(method, url, header_params=hdrs, body=body, _request_timeout=(self._connect_timeout, rt))
        except ApiException as err:
            raise error_from_api_exception(err, verb=verb, resource=label, name=name) from err
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise error_from_transport(err, verb=verb, resource=label, url=url) from err
        resp = r.response
        if 200 <= resp.status < 300:
            return resp
        data = self._read_all(resp, verb=verb, label=label, url=url)
        exc = ApiException(status=resp.status, reason=resp.reason, body=data.decode("utf-8", "replace"))
        exc.headers = resp.headers
        raise error_from_api_exception(exc, verb=verb, resource=label, name=name) from exc

    @staticmethod
    def _read_all(resp: Any, *, verb: str, label: str, url: str) -> bytes:
        try:
            return bytes(resp.data or b"")
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise error_from_transport(err, verb=verb, resource=label, url=url) from err
        finally:
            resp.release_conn()

    def _json(self, method: str, path: str, *, verb: str, label: str, name: str | None = None,
              warnings: MutableSequence[str] | None = None, decode: Callable[[bytes], Obj | None] | None = None,
              **kw: Any) -> Obj:
        resp = self._open(method, path, verb=verb, label=label, name=name, **kw)
        if warnings is not None:
            warnings.extend(parse_warning_headers(resp.headers.getlist("Warning")))
        data = self._read_all(resp, verb=verb, label=label, url=path)
        if not data:
            return {}
        if decode is not None:
            decoded = decode(data)
            if decoded is not None:
                return decoded
        try:
            out = jsonio.loads(data)
        except ValueError as err:
            raise KubeError(f"{verb} {label}: the server sent invalid JSON: {data[:120]!r}") from err
        return out if isinstance(out, dict) else {"items": out}

    def _call(
        self,
        method: str,
        path: str,
        *,
        verb: str,
        label: str,
        name: str | None = None,
        retry_if_sent: bool = True,
        on_retry: Callable[[Unavailable], None] | None = None,
        **kw: Any,
    ) -> Obj:
        target = f"{verb} {label}" + (f" {name}" if name else "")
        return self._retrier.call(
            lambda: self._json(method, path, verb=verb, label=label, name=name, **kw),
            what=target,
            retry_if_sent=retry_if_sent,
            on_retry=on_retry,
        )

    def _namespace(self, res: Resource, namespace: str | None, obj: Obj | None = None) -> str | None:
        if not res.namespaced:
            return None
        ns = namespace or ((obj or {}).get("metadata") or {}).get("namespace")
        if not ns:
            raise ValueError(f"{res.kind} is namespaced: pass a namespace or set metadata.namespace")
        return str(ns)

    # ---- KubeAPI ---------------------------------------------------------------------------------------------

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        path = res.path(self._namespace(res, namespace), name)
        return self._call("GET", path, verb="get", label=resource_label(res), name=name)

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        on_page: Callable[[int], None] | None = None,
        transform: Callable[[Obj], Obj] | None = None,
        page_decoder: Callable[[bytes], Obj | None] | None = None,
        sink: ListSink | None = None,
    ) -> Obj:
        path = res.path(namespace if res.namespaced else None)
        label = resource_label(res)
        base = _selectors(label_selector, field_selector)
        if page_size > 0:
            base.append(("limit", page_size))
        bound = _ListBound(label, self._clock() + self._list_deadline, self._list_deadline, self._clock)
        for restart in range(_LIST_RESTARTS + 1):
            items: list[Obj] = []
            count = 0
            if restart and sink is not None:
                sink.restart()
            first: Obj | None = None
            token: str | None = None
            seen: set[str] = set()
            try:
                while True:
                    query = base + ([("continue", token)] if token else [])
                    page = self._call("GET", path, verb="list", label=label, query=query, decode=page_decoder)
                    listed = page.pop("items", None) or []
                    first = first or page  # its kind and resourceVersion; its items are not kept with it
                    for item in listed:
                        item.setdefault("apiVersion", res.api_version)
                        item.setdefault("kind", res.kind)
                    kept: Iterable[Obj] = listed if transform is None else map(transform, listed)
                    if sink is None:
                        items.extend(kept)
                    else:
                        for item in kept:
                            sink.add(item)
                    count += len(listed)
                    del listed, kept  # the page's whole objects go now, not once the next page is read
                    if on_page is not None:
                        on_page(count)
                    token = (page.get("metadata") or {}).get("continue") or None
                    if not token:
                        break
                    bound.next_page(str(token), seen, count)
            except Gone as err:
                if token is None or restart == _LIST_RESTARTS:
                    raise
                log.info("list %s: continue token expired after %d items, listing again", label, count,
                         exc_info=err)
                continue
            assert first is not None
            meta = first.get("metadata") or {}
            return {
                "apiVersion": first.get("apiVersion", res.api_version),
                "kind": first.get("kind", f"{res.kind}List"),
                "metadata": {"resourceVersion": str(meta.get("resourceVersion", ""))},
                "items": items,
            }
        raise AssertionError("unreachable")  # pragma: no cover

    def create(
        self, res: Resource, obj: Obj, namespace: str | None = None, *, dry_run: bool = False,
        subresource: str | None = None, warnings: MutableSequence[str] | None = None,
    ) -> Obj:
        ns = self._namespace(res, namespace, obj)
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name and (subresource or not meta.get("generateName")):
            raise ValueError(f"create {res.kind}{'/' + subresource if subresource else ''}: metadata.name"
                             f"{'' if subresource else ' or metadata.generateName'} is required")
        query: list[tuple[str, str | int]] = [("dryRun", "All")] if dry_run else []
        ambiguous: list[bool] = []
        try:
            return self._call(
                "POST",
                res.path(ns, name, subresource) if subresource else res.path(ns),
                verb="create",
                label=resource_label(res, subresource),
                name=name or f"{meta.get('generateName')}*",
                query=query,
                body=obj,
                content_type="application/json",
                warnings=warnings,
                # A named create is safe to repeat: at worst the retry answers AlreadyExists (flagged below).
                retry_if_sent=bool(name),
                on_retry=lambda e: ambiguous.append(e.request_sent),
            )
        except AlreadyExists as err:
            if any(ambiguous):
                raise AlreadyExists(
                    f"{err.message} (an earlier attempt of this create may have succeeded before the connection "
                    "failed; the existing object may be ours)",
                    maybe_ours=True,
                    status=err.status,
                    reason=err.reason,
                ) from err
            raise

    def update(self, res: Resource, obj: Obj, namespace: str | None = None, *, subresource: str | None = None) -> Obj:
        ns = self._namespace(res, namespace, obj)
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            raise ValueError(f"update {res.kind}: metadata.name is required")
        return self._call(
            "PUT",
            res.path(ns, name, subresource),
            verb="update",
            label=resource_label(res, subresource),
            name=name,
            body=obj,
            content_type="application/json",
        )

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Obj | JsonPatch,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> Obj:
        if patch_type not in PATCH_CONTENT_TYPES:
            raise ValueError(f"patch_type must be one of {sorted(PATCH_CONTENT_TYPES)}, not {patch_type!r}")
        if (patch_type == "json") != isinstance(patch, list):
            raise ValueError("a json patch is a list of operations; merge and strategic patches are objects")
        return self._call(
            "PATCH",
            res.path(self._namespace(res, namespace), name, subresource),
            verb="patch",
            label=resource_label(res, subresource),
            name=name,
            body=patch,
            content_type=PATCH_CONTENT_TYPES[patch_type],
            retry_if_sent=patch_type != "json",  # "add to /-" twice appends twice
        )

    def delete(self, res: Resource, name: str, namespace: str | None = None, *,
               grace_period_seconds: int | None = None, uid: str | None = None) -> None:
        ambiguous: list[bool] = []
        options: Obj = {}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        extra: dict[str, Any] = {}
        if options:
            extra = {"body": {"apiVersion": "v1", "kind": "DeleteOptions", **options},
                     "content_type": "application/json"}
        try:
            self._call(
                "DELETE",
                res.path(self._namespace(res, namespace), name),
                verb="delete",
                label=resource_label(res),
                name=name,
                on_retry=lambda e: ambiguous.append(e.request_sent),
                **extra,
            )
        except NotFound:
            if any(ambiguous):
                return  # our first attempt reached the server before the connection failed
            raise

    def delete_collection(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        self._call(
            "DELETE",
            res.path(namespace if res.namespaced else None),
            verb="deletecollection",
            label=resource_label(res),
            query=_selectors(label_selector, field_selector),
        )

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
    ) -> WatchStream:
        label = resource_label(res)
        query: list[tuple[str, str | int]] = [("watch", "true"), ("allowWatchBookmarks", "true")]
        query += _selectors(label_selector, field_selector)
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if timeout_seconds is not None:
            query.append(("timeoutSeconds", int(timeout_seconds)))
        path = res.path(namespace if res.namespaced else None)
        # The server ends the stream after timeoutSeconds; a read that outlives that by a margin means a dead
        # connection. Without timeoutSeconds the stream may be idle indefinitely.
        read_timeout = None if timeout_seconds is None else timeout_seconds + max(30.0, self._timeout)
        verb = k8s_verb("GET", named=False, watch=True)
        resp = self._retrier.call(
            lambda: self._open("GET", path, query=query, verb=verb, label=label, read_timeout=read_timeout),
            what=f"watch {label}",
        )
        return WatchStream(resp, resource=label)

    # ---- discovery -------------------------------------------------------------------------------------------

    def server_version(self) -> tuple[int, int]:
        _, major, minor = parse_version(self._call("GET", "/version", verb="get", label="version"))
        return major, minor

    def discovery(self) -> Discovery:
        version = self._call("GET", "/version", verb="get", label="version")
        lists: list[tuple[str, Obj]] = []
        core = self._call("GET", "/api", verb="get", label="api")
        gvs = [str(v) for v in core.get("versions") or []]
        gvs += group_versions(self._call("GET", "/apis", verb="get", label="apis"))
        for gv in gvs:
            path = f"/api/{gv}" if "/" not in gv else f"/apis/{gv}"
            try:
                lists.append((gv, self._call("GET", path, verb="get", label=gv)))
            except (Unavailable, NotFound) as err:
                # kubectl does the same: an unavailable aggregated API (metrics.k8s.io down) must not hide the rest.
                log.warning("discovery: skipping %s: %s", gv, err.message)
        return build_discovery(version, lists)

    def resource_api(self) -> ResourceAPI:
        with self._lock:
            if self._resource_api is not None:
                return self._resource_api
        served = group_versions(self._call("GET", "/apis", verb="get", label="apis"))
        version = pick_resource_version(served)
        if version is None:
            raise NotFound(
                f"{RESOURCE_GROUP} is not served by {self.host} (need v1, v1beta2 or v1beta1; served groups: "
                f"{', '.join(sorted({gv.split('/')[0] for gv in served})) or 'none'})"
            )
        with self._lock:
            self._resource_api = ResourceAPI(version)
            return self._resource_api


__all__ = ["MAX_LIST_PAGES", "PATCH_CONTENT_TYPES", "RestKube", "resource_label"]
