"""The default columns of `kubectl get`: the server-side printers of every kind the emulator serves.

Written from kubernetes/kubernetes pkg/printers/internalversion/printers.go (`AddHandlers` and the `print<Kind>`
functions: column names, types, priorities — priority 1 columns are the `-o wide` ones — and how each cell is
computed, e.g. a pod's READY `ready/total` counting restartable init containers, STATUS from the container states,
RESTARTS `N (5m ago)`; a node's STATUS `Ready,SchedulingDisabled` and ROLES from `node-role.kubernetes.io/*`
labels) and from apimachinery pkg/util/duration/duration.go (`HumanDuration`, the AGE cells). The printers run on
the wire object (v1 JSON), where the real ones run on the internal type; the differences that matter are bridged
here: `status.podIP` stands in for an empty `status.podIPs` (the v1 -> internal conversion does the same), and an
events.k8s.io Event is read through its renamed fields (`regarding`, `note`, `deprecatedSource`, …).

Kinds without a printer get the generic convertor's NAME / CREATED AT columns (apiserver pkg/registry/rest/table.go).
Column descriptions come from the same OpenAPI schemas the emulator serves (`describe(definition, property)`),
i.e. the swagger docs the real printers quote.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]
Describe = Callable[[str, str], str]
_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_CORE = "io.k8s.api.core.v1."


@dataclass(frozen=True)
class Column:
    name: str
    type: str = "string"
    priority: int = 0
    format: str = ""
    description: str | tuple[str, str] = ""  # literal text, or (definition, property) looked up in the schemas

    def definition(self, describe: Describe) -> Obj:
        text = self.description if isinstance(self.description, str) else describe(*self.description)
        return {"name": self.name, "type": self.type, "format": self.format, "description": text,
                "priority": self.priority}


NAME = Column("Name", format="name", description=(_META, "name"))
AGE = Column("Age", description=(_META, "creationTimestamp"))
CONTAINERS = Column("Containers", priority=1, description="Names of each container in the template.")
IMAGES = Column("Images", priority=1, description="Images referenced by each container in the template.")


def _m(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    v = obj.get("metadata")
    return v if isinstance(v, Mapping) else {}


def _d(obj: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(p)
    return obj


def _list(obj: Any, *path: str) -> list[Any]:
    v = _d(obj, *path)
    return v if isinstance(v, list) else []


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    text = value.replace("Z", "+00:00")
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def human_duration(seconds_total: float) -> str:
    """apimachinery's duration.HumanDuration."""
    seconds = int(seconds_total)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        s = seconds % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = seconds // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def since(value: Any, now: datetime) -> str:
    """translateTimestampSince: `<unknown>` for a zero time."""
    t = parse_time(value)
    return "<unknown>" if t is None else human_duration((now - t).total_seconds())


def _age(obj: Mapping[str, Any], now: datetime) -> str:
    return since(_m(obj).get("creationTimestamp"), now)


def _format_labels(labels: Any) -> str:
    """labels.FormatLabels: sorted `k=v` joined by commas, `<none>` when empty."""
    if not isinstance(labels, Mapping) or not labels:
        return "<none>"
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


def _format_selector(selector: Any) -> str:
    """metav1.FormatLabelSelector: `<none>` for nil or empty, else the selector's string form."""
    if not isinstance(selector, Mapping):
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key", ""), req.get("operator", ""), sorted(req.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    text = ",".join(parts)
    return text or "<none>"


def _containers(spec: Any) -> tuple[str, str]:
    cs = _list(spec, "containers")
    return ",".join(str(c.get("name", "")) for c in cs), ",".join(str(c.get("image", "")) for c in cs)


# -- pods ------------------------------------------------------------------------------------------------------------
def _restartable(container: Any) -> bool:
    return isinstance(container, Mapping) and container.get("restartPolicy") == "Always"


def _pod_row(pod: Mapping[str, Any], now: datetime) -> tuple[list[Any], list[Obj]]:
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, _m(pod)
    restarts = restartable_restarts = 0
    total = len(_list(spec, "containers"))
    ready = 0
    last_restart: datetime | None = None
    last_restartable: datetime | None = None
    phase = str(status.get("phase") or "")
    reason = str(status.get("reason") or phase)
    for cond in _list(status, "conditions"):
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    conditions: list[Obj] = []
    if phase == "Succeeded":
        conditions = [{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]
    elif phase == "Failed":
        conditions = [{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]
    inits = {c.get("name"): c for c in _list(spec, "initContainers") if isinstance(c, Mapping)}
    total += sum(1 for c in inits.values() if _restartable(c))

    def later(current: datetime | None, cs: Mapping[str, Any]) -> datetime | None:
        t = parse_time(_d(cs, "lastState", "terminated", "finishedAt"))
        return t if t is not None and (current is None or t > current) else current

    initializing = False
    init_statuses = _list(status, "initContainerStatuses")
    for i, cs in enumerate(init_statuses):
        restarts += int(cs.get("restartCount") or 0)
        last_restart = later(last_restart, cs)
        is_sidecar = _restartable(inits.get(cs.get("name")))
        if is_sidecar:
            restartable_restarts += int(cs.get("restartCount") or 0)
            last_restartable = later(last_restartable, cs)
        term, waiting = _d(cs, "state", "terminated"), _d(cs, "state", "waiting")
        if isinstance(term, Mapping) and int(term.get("exitCode") or 0) == 0:
            continue
        if is_sidecar and cs.get("started") is True:
            if cs.get("ready"):
                ready += 1
            continue
        if isinstance(term, Mapping):
            if not term.get("reason"):
                reason = (f"Init:Signal:{term['signal']}" if term.get("signal")
                          else f"Init:ExitCode:{int(term.get('exitCode') or 0)}")
            else:
                reason = "Init:" + str(term["reason"])
        elif isinstance(waiting, Mapping) and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = "Init:" + str(waiting["reason"])
        else:
            reason = f"Init:{i}/{len(_list(spec, 'initContainers'))}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True" for c in _list(status, "conditions"))
    if not initializing or initialized:
        restarts, last_restart = restartable_restarts, last_restartable
        running = False
        for cs in reversed(_list(status, "containerStatuses")):
            restarts += int(cs.get("restartCount") or 0)
            last_restart = later(last_restart, cs)
            term, waiting = _d(cs, "state", "terminated"), _d(cs, "state", "waiting")
            if isinstance(waiting, Mapping) and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif isinstance(term, Mapping) and term.get("reason"):
                reason = str(term["reason"])
            elif isinstance(term, Mapping):
                reason = f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{int(term.get('exitCode') or 0)}"
            elif cs.get("ready") and isinstance(_d(cs, "state", "running"), Mapping):
                running = True
                ready += 1
        if reason == "Completed" and running:
            pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in _list(status, "conditions"))
            reason = "Running" if pod_ready else "NotReady"
    if meta.get("deletionTimestamp") and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif meta.get("deletionTimestamp") and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    restarts_cell = str(restarts)
    if restarts and last_restart is not None:
        restarts_cell = f"{restarts} ({human_duration((now - last_restart).total_seconds())} ago)"
    ips = _list(status, "podIPs")
    pod_ip = (ips[0].get("ip") if ips and isinstance(ips[0], Mapping) else None) or status.get("podIP") or "<none>"
    gates = _list(spec, "readinessGates")
    gates_cell = "<none>"
    if gates:
        true = 0
        for gate in gates:
            for cond in _list(status, "conditions"):
                if cond.get("type") == gate.get("conditionType"):
                    true += cond.get("status") == "True"
                    break
        gates_cell = f"{true}/{len(gates)}"
    cells = [meta.get("name", ""), f"{ready}/{total}", reason, restarts_cell, _age(pod, now), pod_ip,
             spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>", gates_cell]
    return cells, conditions


# -- nodes -----------------------------------------------------------------------------------------------------------
def _node_row(node: Mapping[str, Any], now: datetime) -> list[Any]:
    status, spec, meta = node.get("status") or {}, node.get("spec") or {}, _m(node)
    states = []
    for cond in _list(status, "conditions"):
        if cond.get("type") == "Ready":
            states = ["Ready" if cond.get("status") == "True" else "NotReady"]
    if not states:
        states = ["Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = set()
    for key, value in (meta.get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key[len("node-role.kubernetes.io/"):]:
            roles.add(key[len("node-role.kubernetes.io/"):])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        return next((a.get("address", "") for a in _list(status, "addresses") if a.get("type") == kind), "<none>")

    return [meta.get("name", ""), ",".join(states), ",".join(sorted(roles)) or "<none>", _age(node, now),
            info.get("kubeletVersion", ""), address("InternalIP"), address("ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


# -- events ----------------------------------------------------------------------------------------------------------
def _event_row(ev: Mapping[str, Any], now: datetime, new_api: bool) -> list[Any]:
    if new_api:  # events.k8s.io/v1 field names of the same internal Event
        involved = ev.get("regarding") or {}
        message, source = ev.get("note") or "", ev.get("deprecatedSource") or {}
        first_ts, last_ts, count = ev.get("deprecatedFirstTimestamp"), ev.get("deprecatedLastTimestamp"), ev.get("deprecatedCount")
    else:
        involved = ev.get("involvedObject") or {}
        message, source = ev.get("message") or "", ev.get("source") or {}
        first_ts, last_ts, count = ev.get("firstTimestamp"), ev.get("lastTimestamp"), ev.get("count")
    first = since(first_ts, now) if parse_time(first_ts) else since(ev.get("eventTime"), now)
    last = since(last_ts, now) if parse_time(last_ts) else first
    count = int(count or 0)
    series = ev.get("series")
    if isinstance(series, Mapping):
        last = since(series.get("lastObservedTime"), now)
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1
    kind = str(involved.get("kind") or "").lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    component = source.get("component") or ev.get("reportingController") or ""
    host = source.get("host") or ev.get("reportingInstance") or ""
    return [last, ev.get("type", ""), ev.get("reason", ""), target, involved.get("fieldPath", ""),
            f"{component}, {host}" if host else component, str(message).strip(), first, count, _m(ev).get("name", "")]


# -- services --------------------------------------------------------------------------------------------------------
def _service_row(svc: Mapping[str, Any], now: datetime) -> list[Any]:
    spec = svc.get("spec") or {}
    typ = spec.get("type") or ""
    ips = spec.get("clusterIPs") or []
    external_ips = spec.get("externalIPs") or []
    if typ in ("ClusterIP", "NodePort"):
        external = ",".join(external_ips) or "<none>"
    elif typ == "LoadBalancer":
        lb = []
        for ing in _list(svc, "status", "loadBalancer", "ingress"):
            value = ing.get("ip") or ing.get("hostname")
            if value and value not in lb:
                lb.append(value)
        external = ",".join(lb + external_ips) or "<pending>"
    elif typ == "ExternalName":
        external = spec.get("externalName", "")
    else:
        external = "<unknown>"
    ports = []
    for p in spec.get("ports") or []:
        proto = p.get("protocol", "")
        ports.append(f"{p.get('port')}:{p['nodePort']}/{proto}" if p.get("nodePort") else f"{p.get('port')}/{proto}")
    return [_m(svc).get("name", ""), typ, ips[0] if ips else "<none>", external, ",".join(ports) or "<none>",
            _age(svc, now), _format_labels(spec.get("selector"))]


def _claim_state(claim: Mapping[str, Any]) -> str:
    states = []
    deleted = bool(_m(claim).get("deletionTimestamp"))
    if deleted:
        states.append("deleted")
    if not _d(claim, "status", "allocation"):
        if not deleted:
            states.append("pending")
    else:
        states.append("allocated")
        if _list(claim, "status", "reservedFor"):
            states.append("reserved")
    return ",".join(states)


def _job_row(job: Mapping[str, Any], now: datetime) -> list[Any]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = "" if start is None else human_duration(((end or now) - start).total_seconds())

    def cond(kind: str) -> bool:
        return next((c.get("status") == "True" for c in _list(status, "conditions") if c.get("type") == kind), False)

    if cond("Complete"):
        state = "Complete"
    elif cond("Failed"):
        state = "Failed"
    elif _m(job).get("deletionTimestamp"):
        state = "Terminating"
    elif cond("Suspended"):
        state = "Suspended"
    elif cond("FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    names, images = _containers(_d(spec, "template", "spec"))
    return [_m(job).get("name", ""), state, completions, duration, _age(job, now), names, images,
            _format_selector(spec.get("selector"))]


def _quota_row(q: Mapping[str, Any], now: datetime) -> list[Any]:
    hard, used = _d(q, "status", "hard") or {}, _d(q, "status", "used") or {}
    requests: list[str] = []
    limits: list[str] = []
    for name in sorted(hard):
        target = limits if name.split(".")[0] == "limits" and "." in name else requests
        target.append(f"{name}: {used.get(name, '0')}/{hard[name]}")
    return [_m(q).get("name", ""), _age(q, now), ", ".join(requests), ", ".join(limits)]


Row = Callable[[Mapping[str, Any], datetime], list[Any]]


def _simple(*cells: Callable[[Mapping[str, Any]], Any]) -> Row:
    """NAME, the given cells, AGE."""
    return lambda o, now: [_m(o).get("name", ""), *(c(o) for c in cells), _age(o, now)]


def _workload(kind: str) -> Row:
    def row(o: Mapping[str, Any], now: datetime) -> list[Any]:
        spec, status = o.get("spec") or {}, o.get("status") or {}
        names, images = _containers(_d(spec, "template", "spec"))
        name, age = _m(o).get("name", ""), _age(o, now)
        desired = int(spec.get("replicas") or 0)
        if kind == "Deployment":
            return [name, f"{int(status.get('readyReplicas') or 0)}/{desired}", int(status.get("updatedReplicas") or 0),
                    int(status.get("availableReplicas") or 0), age, names, images, _format_selector(spec.get("selector"))]
        if kind == "StatefulSet":
            return [name, f"{int(status.get('readyReplicas') or 0)}/{desired}", age, names, images]
        if kind == "ReplicaSet":
            return [name, desired, int(status.get("replicas") or 0), int(status.get("readyReplicas") or 0), age,
                    names, images, _format_selector(spec.get("selector"))]
        return [name, int(status.get("desiredNumberScheduled") or 0), int(status.get("currentNumberScheduled") or 0),
                int(status.get("numberReady") or 0), int(status.get("updatedNumberScheduled") or 0),
                int(status.get("numberAvailable") or 0), _format_labels(_d(spec, "template", "spec", "nodeSelector")),
                age, names, images, _format_selector(spec.get("selector"))]
    return row


def _cronjob_row(o: Mapping[str, Any], now: datetime) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    last = since(status["lastScheduleTime"], now) if status.get("lastScheduleTime") else "<none>"
    template = _d(spec, "jobTemplate", "spec") or {}
    names, images = _containers(_d(template, "template", "spec"))
    suspend = spec.get("suspend")
    return [_m(o).get("name", ""), spec.get("schedule", ""), spec.get("timeZone") or "<none>",
            "<unset>" if suspend is None else ("True" if suspend else "False"), len(_list(status, "active")), last,
            _age(o, now), names, images, _format_selector(template.get("selector"))]


@dataclass(frozen=True)
class Printer:
    columns: tuple[Column, ...]
    row: Callable[[Mapping[str, Any], datetime], tuple[list[Any], list[Obj]]]


def _plain(row: Row) -> Callable[[Mapping[str, Any], datetime], tuple[list[Any], list[Obj]]]:
    return lambda o, now: (row(o, now), [])


def _desc(definition: str, prop: str) -> tuple[str, str]:
    return (definition, prop)


_POD_COLUMNS = (
    NAME,
    Column("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
    Column("Status", description="The aggregate status of the containers in this pod."),
    Column("Restarts", description="The number of times the containers in this pod have been restarted and when the "
           "last container in this pod has restarted."),
    AGE,
    Column("IP", priority=1, description=_desc(_CORE + "PodStatus", "podIP")),
    Column("Node", priority=1, description=_desc(_CORE + "PodSpec", "nodeName")),
    Column("Nominated Node", priority=1, description=_desc(_CORE + "PodStatus", "nominatedNodeName")),
    Column("Readiness Gates", priority=1, description=_desc(_CORE + "PodSpec", "readinessGates")),
)
_NODE_COLUMNS = (
    NAME,
    Column("Status", description="The status of the node"),
    Column("Roles", description="The roles of the node"),
    AGE,
    Column("Version", description=_desc(_CORE + "NodeSystemInfo", "kubeletVersion")),
    Column("Internal-IP", priority=1, description=_desc(_CORE + "NodeStatus", "addresses")),
    Column("External-IP", priority=1, description=_desc(_CORE + "NodeStatus", "addresses")),
    Column("OS-Image", priority=1, description=_desc(_CORE + "NodeSystemInfo", "osImage")),
    Column("Kernel-Version", priority=1, description=_desc(_CORE + "NodeSystemInfo", "kernelVersion")),
    Column("Container-Runtime", priority=1, description=_desc(_CORE + "NodeSystemInfo", "containerRuntimeVersion")),
)
_EVENT_COLUMNS = (
    Column("Last Seen", description=_desc(_CORE + "Event", "lastTimestamp")),
    Column("Type", description=_desc(_CORE + "Event", "type")),
    Column("Reason", description=_desc(_CORE + "Event", "reason")),
    Column("Object", description=_desc(_CORE + "Event", "involvedObject")),
    Column("Subobject", priority=1, description=_desc(_CORE + "ObjectReference", "fieldPath")),
    Column("Source", priority=1, description=_desc(_CORE + "Event", "source")),
    Column("Message", description=_desc(_CORE + "Event", "message")),
    Column("First Seen", priority=1, description=_desc(_CORE + "Event", "firstTimestamp")),
    Column("Count", priority=1, description=_desc(_CORE + "Event", "count")),
    Column("Name", priority=1, format="name", description=(_META, "name")),
)
_WORKLOAD_TAIL = (CONTAINERS, IMAGES)


def _sel(definition: str) -> Column:
    return Column("Selector", priority=1, description=_desc(definition, "selector"))


_APPS = "io.k8s.api.apps.v1."
_BATCH = "io.k8s.api.batch.v1."
_RESOURCE = "io.k8s.api.resource.v1."

PRINTERS: dict[tuple[str, str], Printer] = {
    ("", "pods"): Printer(_POD_COLUMNS, _pod_row),
    ("", "nodes"): Printer(_NODE_COLUMNS, _plain(_node_row)),
    ("", "events"): Printer(_EVENT_COLUMNS, _plain(lambda o, now: _event_row(o, now, False))),
    ("events.k8s.io", "events"): Printer(_EVENT_COLUMNS, _plain(lambda o, now: _event_row(o, now, True))),
    ("", "namespaces"): Printer((NAME, Column("Status", description="The status of the namespace"), AGE),
                               _plain(_simple(lambda o: _d(o, "status", "phase") or ""))),
    ("", "secrets"): Printer((NAME, Column("Type", description=_desc(_CORE + "Secret", "type")),
                              Column("Data", description=_desc(_CORE + "Secret", "data")), AGE),
                             _plain(_simple(lambda o: o.get("type") or "", lambda o: len(o.get("data") or {})))),
    ("", "configmaps"): Printer((NAME, Column("Data", description=_desc(_CORE + "ConfigMap", "data")), AGE),
                                _plain(_simple(lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})))),
    ("", "serviceaccounts"): Printer((NAME, Column("Secrets", description=_desc(_CORE + "ServiceAccount", "secrets")), AGE),
                                     _plain(_simple(lambda o: len(o.get("secrets") or [])))),
    ("", "services"): Printer((NAME, Column("Type", description=_desc(_CORE + "ServiceSpec", "type")),
                               Column("Cluster-IP", description=_desc(_CORE + "ServiceSpec", "clusterIP")),
                               Column("External-IP", description=_desc(_CORE + "ServiceSpec", "externalIPs")),
                               Column("Port(s)", description=_desc(_CORE + "ServiceSpec", "ports")), AGE,
                               Column("Selector", priority=1, description=_desc(_CORE + "ServiceSpec", "selector"))),
                              _plain(_service_row)),
    ("", "resourcequotas"): Printer((NAME, AGE, Column("Request", description="Request represents a minimum amount of "
                                                       "cpu/memory that a container may consume."),
                                     Column("Limit", description="Limits control the maximum amount of cpu/memory that "
                                            "a container may use independent of contention on the node.")),
                                    _plain(_quota_row)),
    ("apps", "deployments"): Printer((NAME, Column("Ready", description="Number of the pod with ready state"),
                                      Column("Up-to-date", description=_desc(_APPS + "DeploymentStatus", "updatedReplicas")),
                                      Column("Available", description=_desc(_APPS + "DeploymentStatus", "availableReplicas")),
                                      AGE, *_WORKLOAD_TAIL, _sel(_APPS + "DeploymentSpec")),
                                     _plain(_workload("Deployment"))),
    ("apps", "statefulsets"): Printer((NAME, Column("Ready", description="Number of the pod with ready state"), AGE,
                                       *_WORKLOAD_TAIL), _plain(_workload("StatefulSet"))),
    ("apps", "replicasets"): Printer((NAME, Column("Desired", "integer", description=_desc(_APPS + "ReplicaSetSpec", "replicas")),
                                      Column("Current", "integer", description=_desc(_APPS + "ReplicaSetStatus", "replicas")),
                                      Column("Ready", "integer", description=_desc(_APPS + "ReplicaSetStatus", "readyReplicas")),
                                      AGE, *_WORKLOAD_TAIL, _sel(_APPS + "ReplicaSetSpec")),
                                     _plain(_workload("ReplicaSet"))),
    ("apps", "daemonsets"): Printer((NAME, Column("Desired", "integer", description=_desc(_APPS + "DaemonSetStatus", "desiredNumberScheduled")),
                                     Column("Current", "integer", description=_desc(_APPS + "DaemonSetStatus", "currentNumberScheduled")),
                                     Column("Ready", "integer", description=_desc(_APPS + "DaemonSetStatus", "numberReady")),
                                     Column("Up-to-date", "integer", description=_desc(_APPS + "DaemonSetStatus", "updatedNumberScheduled")),
                                     Column("Available", "integer", description=_desc(_APPS + "DaemonSetStatus", "numberAvailable")),
                                     Column("Node Selector", description=_desc(_CORE + "PodSpec", "nodeSelector")),
                                     AGE, *_WORKLOAD_TAIL, _sel(_APPS + "DaemonSetSpec")),
                                    _plain(_workload("DaemonSet"))),
    ("batch", "jobs"): Printer((NAME, Column("Status", description="Status of the job."),
                                Column("Completions", description=_desc(_BATCH + "JobStatus", "succeeded")),
                                Column("Duration", description="Time required to complete the job."), AGE,
                                *_WORKLOAD_TAIL, _sel(_BATCH + "JobSpec")), _plain(_job_row)),
    ("batch", "cronjobs"): Printer((NAME, Column("Schedule", description=_desc(_BATCH + "CronJobSpec", "schedule")),
                                    Column("Timezone", description=_desc(_BATCH + "CronJobSpec", "timeZone")),
                                    Column("Suspend", "boolean", description=_desc(_BATCH + "CronJobSpec", "suspend")),
                                    Column("Active", "integer", description=_desc(_BATCH + "CronJobStatus", "active")),
                                    Column("Last Schedule", description=_desc(_BATCH + "CronJobStatus", "lastScheduleTime")),
                                    AGE, *_WORKLOAD_TAIL, _sel(_BATCH + "JobSpec")), _plain(_cronjob_row)),
    ("scheduling.k8s.io", "priorityclasses"): Printer(
        (NAME, Column("Value", "integer", description=_desc("io.k8s.api.scheduling.v1.PriorityClass", "value")),
         Column("Global-Default", "boolean", description=_desc("io.k8s.api.scheduling.v1.PriorityClass", "globalDefault")),
         AGE, Column("PreemptionPolicy", description=_desc("io.k8s.api.scheduling.v1.PriorityClass", "preemptionPolicy"))),
        _plain(lambda o, now: [_m(o).get("name", ""), int(o.get("value") or 0), bool(o.get("globalDefault")),
                               _age(o, now), o.get("preemptionPolicy") or ""])),
    ("coordination.k8s.io", "leases"): Printer(
        (NAME, Column("Holder", description=_desc("io.k8s.api.coordination.v1.LeaseSpec", "holderIdentity")), AGE),
        _plain(_simple(lambda o: _d(o, "spec", "holderIdentity") or ""))),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): Printer(
        (NAME, Column("Webhooks", "integer", description="Webhooks indicates the number of webhooks registered in this "
                      "configuration"), AGE), _plain(_simple(lambda o: len(o.get("webhooks") or [])))),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): Printer(
        (NAME, Column("Webhooks", "integer", description="Webhooks indicates the number of webhooks registered in this "
                      "configuration"), AGE), _plain(_simple(lambda o: len(o.get("webhooks") or [])))),
    ("resource.k8s.io", "deviceclasses"): Printer((NAME, AGE), _plain(_simple())),
    ("resource.k8s.io", "resourceclaimtemplates"): Printer((NAME, AGE), _plain(_simple())),
    ("resource.k8s.io", "resourceclaims"): Printer(
        (NAME, Column("State", description="A summary of the current state (allocated, pending, reserved, etc.)."), AGE),
        _plain(_simple(_claim_state))),
    ("resource.k8s.io", "resourceslices"): Printer(
        (NAME, Column("Node", description=_desc(_RESOURCE + "ResourceSliceSpec", "nodeName")),
         Column("Driver", description=_desc(_RESOURCE + "ResourceSliceSpec", "driver")),
         Column("Pool", description=_desc(_RESOURCE + "ResourcePool", "name")), AGE),
        _plain(lambda o, now: [_m(o).get("name", ""), _d(o, "spec", "nodeName") or "", _d(o, "spec", "driver") or "",
                               _d(o, "spec", "pool", "name") or "", _age(o, now)])),
}

# The generic table convertor (apiserver pkg/registry/rest/table.go) for kinds without a printer.
DEFAULT = Printer(
    (NAME, Column("Created At", "date", description=(_META, "creationTimestamp"))),
    _plain(lambda o, now: [_m(o).get("name", ""), _m(o).get("creationTimestamp") or ""]),
)


def printer_for(group: str, plural: str) -> Printer:
    return PRINTERS.get((group, plural), DEFAULT)
