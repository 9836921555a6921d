"""The demo's story, step by step. Each step does one thing an operator would do (or that the cluster's teams do),
says what happened in plain words, names the commands that show it, and checks the outcome it claims; a wrong
outcome ends the demo with `DemoFailed` (the CLI exits 1).

1. A cluster on the device plugin: two nodes, 8 GPUs each, every GPU on the legacy side (split 0).
2. Legacy workloads running in team-a and team-b.
3. `bridge migrate-report` on the live cluster (JSON narrated, HTML written): nothing blocks team-a.
4. team-a to `shadow`: a new pod still runs on the device plugin and carries the translation it would get.
5. team-a to `dra`: new pods are translated to ResourceClaims, the controller moves free GPUs to DRA for them, they
   run on DRA devices; the old pods keep their UIDs, GPUs and containers.
6. Demand shifts: team-b needs more GPUs than the legacy side has free once team-a's batch jobs finish; the
   controller moves the freed GPUs back.
7. The report again: team-a is ready. Its old pods still hold device-plugin GPUs and every other GPU is busy, but
   the report sees the controller act (the decisions it records) and counts the GPUs those pods free when they are
   replaced, which the controller then moves.
8. team-a's old pods are replaced (as a rollout would): they come back through DRA, as the report said.
Throughout, a `SideWatch` samples every node: no GPU is ever held twice or offered to both APIs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.kube.api import NAMESPACES, PODS, KubeAPI, Obj
from bridge.kube.errors import NotFound
from bridge.sandbox.cluster import SandboxCluster
from bridge.sandbox.cluster.inspect import SideWatch
from bridge.sandbox.demo.commands import Commands, Ran
from bridge.sandbox.demo.narrate import Narrator
from bridge.sandbox.demo.observe import (
    PodRecord,
    Sides,
    claim_devices,
    decisions,
    differences,
    legacy_devices,
    phase,
    pod_api,
    pods_per_api,
    record_pod,
    sides_per_node,
)
from bridge.sandbox.demo.workloads import RunWatch, WaitFailed, create_all, gpu_pod, wait_for

SHADOW_ANNOTATION = "dra-bridge.io/shadow-translation"
MIGRATING, STAYING = "team-a", "team-b"
STEPS = 8


class DemoFailed(Exception):
    """A step's outcome was not what the demo claims; the message says what was expected and what was seen."""


@dataclass(frozen=True)
class Timings:
    node_status_frequency: float  # the kubelets' nodeStatusUpdateFrequency (a legacy -> DRA move waits for it)
    split_grace: float  # `bridge node --split-grace` (a DRA -> legacy move waits this long)
    controller_interval: float  # `bridge controller --interval`
    cooldown: float  # `bridge controller --cooldown` (a node changes direction only after it)
    job_seconds: float  # how long the Job-like pods run
    bound: float  # how long any one wait may take before the step counts as failed


FAST = Timings(node_status_frequency=0.5, split_grace=0.5, controller_interval=0.5, cooldown=2.0, job_seconds=3.0,
               bound=90.0)
NORMAL = Timings(node_status_frequency=2.0, split_grace=1.0, controller_interval=1.0, cooldown=10.0,
                 job_seconds=8.0, bound=180.0)


@dataclass
class Results:
    """What the demo found, for the summary (and `summary.json`)."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)
    html: str = ""


def _short(uuid: str) -> str:
    return uuid[:12] + "..." if len(uuid) > 15 else uuid


class Story:
    def __init__(self, cluster: SandboxCluster, watch: SideWatch, narrator: Narrator, out_dir: Path,
                 timings: Timings) -> None:
        self.c = cluster
        self.api: KubeAPI = cluster.api
        self.watch = watch
        self.n = narrator
        self.out = out_dir
        self.t = timings
        self.cmd = Commands(cluster.kubeconfig)
        self.results = Results()
        self.old: dict[tuple[str, str], PodRecord] = {}
        self.nodes = [node.name for node in cluster.nodes]

    # -- helpers ------------------------------------------------------------------------------------------------

    def ensure(self, ok: bool, claim: str, seen: str = "") -> None:
        """Print the check; a wrong outcome ends the demo."""
        self.n.check(ok, claim if ok else f"{claim}; saw: {seen}")
        self.results.steps[-1]["checks"].append({"claim": claim, "ok": ok})
        if not ok:
            raise DemoFailed(f"step {self.n.step_no} ({self.results.steps[-1]['title']}): expected {claim}; saw: "
                             f"{seen}")

    def step(self, title: str) -> None:
        self.n.step(title)
        self.results.steps.append({"title": title, "checks": [], "startedAt": round(self.n.elapsed(), 1)})

    def ran(self, r: Ran, *, show_output: bool = True, expect: tuple[int, ...] = (0,)) -> Ran:
        self.n.write(f"  $ {r.shown}")
        if show_output and r.stdout.strip():
            self.n.block(r.stdout)
        self.ensure(r.code in expect, f"`{r.shown}` exits {' or '.join(map(str, expect))}",
                    f"exit {r.code}: {(r.stderr or r.stdout).strip()[-400:]}")
        return r

    def wait(self, what: str, check: Any, seen: Any = lambda: "") -> Any:
        try:
            return wait_for(what, check, self.t.bound, seen)
        except WaitFailed as err:
            self.ensure(False, what, str(err))

    def run_pods(self, namespace: str, names: list[str]) -> RunWatch:
        watch = RunWatch(self.api, namespace, names)
        try:
            return watch.wait(self.t.bound)
        except WaitFailed as err:
            self.ensure(False, f"{', '.join(names)} run", str(err))
            raise  # not reached: ensure raised

    def sides(self) -> dict[str, Sides]:
        return sides_per_node(self.api)

    def sides_table(self, sides: dict[str, Sides]) -> None:
        self.n.table(["NODE", "LEGACY", "DRA", "IN TRANSIT"],
                     [[name, s.legacy, s.dra, s.withdrawn] for name, s in sides.items()])

    def settled(self) -> dict[str, Sides]:
        """Wait for every node daemon to serve the split its Node asks for (no GPU in transit)."""
        try:
            self.c.wait_daemons_settled(self.t.bound)
        except TimeoutError as err:
            self.ensure(False, "every node serves the split it asks for", str(err))
        def calm() -> dict[str, Sides] | None:
            sides = self.sides()
            return sides if all(v.withdrawn == 0 for v in sides.values()) else None

        found: dict[str, Sides] = self.wait("every node's split status to show no GPU in transit", calm)
        return found

    def untouched(self) -> None:
        """The pods running before the migration still run with the same UID, node, GPUs and containers."""
        now = legacy_devices(self.c)
        changed = []
        for (ns, name), before in self.old.items():
            try:
                pod = self.api.get(PODS, name, ns)
            except NotFound:
                changed.append(f"{ns}/{name} is gone")
                continue
            diff = differences(before, record_pod(pod, now.get((ns, name), set())))
            if phase(pod) != "Running":
                diff.append(f"phase {phase(pod)}")
            changed += [f"{ns}/{name}: {d}" for d in diff]
        self.ensure(not changed, f"the {len(self.old)} pods that ran before keep their UID, node, GPUs and "
                                 "containers (no restart)", "; ".join(changed))

    def decisions_since(self, since: float, direction: str) -> list[tuple[str, str]]:
        """(node, reason) of the controller's decisions in `direction` recorded after `since` (epoch seconds)."""
        out = []
        for node, d in decisions(self.api).items():
            when = _epoch(d.time)
            if d.direction == direction and not d.dry_run and when >= since - 1:
                out.append((node, d.reason))
        return out

    def next_second(self) -> None:
        """Wait for the next whole second: creationTimestamp has one-second resolution, and `bridge namespace
        status` counts the pods created after the flip's second (one created within it may predate the flip)."""
        time.sleep(1.0 - (time.time() % 1.0) + 0.05)

    def namespace(self, name: str) -> None:
        self.api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # -- the steps ----------------------------------------------------------------------------------------------

    def run(self) -> Results:
        self.cluster_on_the_device_plugin()
        self.legacy_workloads()
        self.report("report-before", "The migration report, before anything changes", before=True)
        self.shadow()
        self.dra()
        self.demand_shifts()
        self.report("report-after", "The report again, with the controller in the picture", before=False)
        self.replace_old_pods()
        return self.results

    def cluster_on_the_device_plugin(self) -> None:
        self.step("A GPU cluster that runs on the device plugin")
        gpus = self.c.nodes[0].spec.gpus
        self.n.label("What happened", f"{len(self.nodes)} nodes ({', '.join(self.nodes)}) with {gpus} simulated "
                     "GPUs each. On every node the real `bridge node` daemon owns the GPUs and serves both kubelet "
                     "APIs: the device plugin (nvidia.com/gpu) and DRA (ResourceSlices). Every GPU starts on the "
                     "legacy side (split 0), as on a node just handed over from the vendor device plugin. The real "
                     "admission webhook and the real `bridge controller` run too.")
        sides = self.settled()
        self.sides_table(sides)
        self.ensure(all(s.dra == 0 and s.legacy > 0 for s in sides.values()),
                    "every GPU is on the legacy side", str(sides))
        self.n.commands("kubectl get nodes -o custom-columns=NODE:.metadata.name,"
                        "GPUS:.status.allocatable.nvidia\\.com/gpu",
                        f"bridge node status {self.nodes[0]}")

    def legacy_workloads(self) -> None:
        self.step("Legacy workloads are running")
        for ns in (MIGRATING, STAYING):
            self.namespace(ns)
        pods = [gpu_pod(MIGRATING, "train-a", 2), gpu_pod(MIGRATING, "infer-a", 1),
                gpu_pod(STAYING, "train-b", 4), gpu_pod(STAYING, "infer-b", 1)]
        create_all(self.api, pods)
        for ns in (MIGRATING, STAYING):
            self.run_pods(ns, [p["metadata"]["name"] for p in pods if p["metadata"]["namespace"] == ns])
        held = legacy_devices(self.c)
        rows = []
        for p in pods:
            ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
            pod = self.api.get(PODS, name, ns)
            self.old[(ns, name)] = record_pod(pod, held.get((ns, name), set()))
            rows.append([f"{ns}/{name}", pod["spec"]["nodeName"], "device plugin",
                         " ".join(_short(u) for _, u in sorted(held.get((ns, name), set())))])
        self.n.label("What happened", f"Two teams run GPU pods the way they do today, asking `nvidia.com/gpu: N`. "
                     f"{MIGRATING} will move to DRA, {STAYING} stays on the device plugin. The kubelets gave each "
                     "pod GPUs through the device plugin (GPU UUIDs, as NVIDIA's plugin hands them out):")
        self.n.table(["POD", "NODE", "API", "GPUS"], rows)
        want = {f"{p['metadata']['namespace']}/{p['metadata']['name']}":
                int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) for p in pods}
        got = {f"{ns}/{name}": len(r.devices) for (ns, name), r in self.old.items()}
        self.ensure(got == want, "each pod holds the GPUs it asked for, through the device plugin", str(got))
        self.n.commands("kubectl get pods -A -o wide",
                        "kubectl get pod -n team-a train-a -o jsonpath='{.spec.containers[0].resources}'")

    def report(self, name: str, title: str, *, before: bool) -> None:
        self.step(title)
        as_json, doc, as_html, html = self.cmd.report(self.out, name)
        self.n.write(f"  $ {as_json.shown}")
        self.n.write(f"  $ {as_html.shown}")
        self.ensure(doc is not None and as_html.code == as_json.code,
                    "both runs answer (exit 0: no blockers, 1: blockers) with the same verdict",
                    f"exit {as_json.code} / {as_html.code}: {(as_json.stderr or as_html.stderr).strip()[-400:]}")
        assert doc is not None
        namespaces = {n["name"]: n for n in doc.get("namespaces") or []}
        counts = doc.get("summary", {}).get("findings", {})
        self.n.label("What happened", f"The read-only report scanned the live sandbox: overall "
                     f"{doc.get('status')} ({counts.get('blocker', 0)} blockers, {counts.get('warning', 0)} "
                     f"warnings, {counts.get('info', 0)} notes), exit status {as_json.code}. Per namespace:")
        self.n.table(["NAMESPACE", "MODE", "STATUS", "GPUS", "RULES"],
                     [[n["name"], n.get("mode", ""), n.get("status", ""),
                       sum((n.get("gpus") or {}).values()), ",".join(n.get("rules") or []) or "-"]
                      for n in namespaces.values()])
        findings = [f for f in doc.get("findings") or [] if f.get("severity") in ("blocker", "warning")]
        if findings:
            self.n.say("What it says to fix or know:")
            for f in findings[:6]:
                obj = f.get("object") or {}
                self.n.say(f"{f.get('severity')} {f.get('rule')} {obj.get('kind')}/{obj.get('name')}: "
                           f"{f.get('message')}", indent=4)
        decided = [f for f in doc.get("findings") or [] if f.get("rule") == "DRB014"]
        for f in decided[:4]:
            self.n.say(f"controller decision on {f['object'].get('name')}: {f.get('message')}", indent=4)
        team = namespaces.get(MIGRATING, {})
        self.results.reports[name] = {"exitCode": as_json.code, "status": doc.get("status"),
                                      "namespaces": {k: v.get("status") for k, v in namespaces.items()},
                                      "json": str(self.out / f"{name}.json"), "html": str(html)}
        self.results.html = str(html)
        controller = doc.get("splitController") or {}
        capacity = next((f for f in doc.get("findings") or [] if f.get("rule") == "DRB032"
                         and (f.get("object") or {}).get("name") == MIGRATING), None) or {}
        if before:
            commands = (capacity.get("details") or {}).get("commands") or []
            said = (f"DRB032 says the DRA side cannot hold {MIGRATING} yet: {capacity.get('message')}"
                    if capacity else f"DRB032 has nothing to say about {MIGRATING}.")
            self.n.label("Look at", f"whether anything blocks {MIGRATING}: a blocker (exit 1) would have to be "
                         f"fixed first. {said} The report knows `bridge controller` by its Lease, its Deployment or "
                         "the decisions it records; this one has decided nothing yet (the report says: "
                         f"{controller.get('state')})"
                         + (f", so the report gives the commands that raise the split by hand ({'; '.join(commands)})"
                            if commands else "")
                         + ". The controller will do that itself as soon as pods ask for DRA devices.")
            self.ensure(as_json.code == 0 and team.get("status") != "blocked",
                        f"nothing blocks moving {MIGRATING} (exit 0)",
                        f"exit {as_json.code}, {MIGRATING} {team.get('status')}")
        else:
            self.n.say(f"DRB032 on {MIGRATING}: {capacity.get('message', '(none)')}", indent=4)
            details = capacity.get("details") or {}
            olds = {name: r for (ns, name), r in self.old.items() if ns == MIGRATING}
            held = sum(len(r.devices) for r in olds.values())
            free_now = int(details.get("movableDevices", 0)) - int(details.get("freedByNamespace", 0))
            busy = "every other GPU is busy" if free_now <= 0 else f"{free_now} other GPU(s) are free"
            self.n.label("Look at", f"{MIGRATING}: mode dra and ready. Its first pods ({', '.join(sorted(olds))}, on "
                         f"{', '.join(sorted({r.node for r in olds.values()}))}) still hold {held} device-plugin "
                         f"GPU(s) and {busy}, so the DRA side cannot hold the namespace as it is; but the report sees "
                         "the controller act (the decisions it recorded) and counts the GPUs those pods free when "
                         "they are replaced: a note, not a blocker. " + self._plan_of(doc, STAYING)
                         + " The next step replaces the old pods.")
            self.ensure(as_json.code == 0 and team.get("mode") == "dra" and team.get("status") == "ready",
                        f"{MIGRATING} is in dra mode and ready, no blockers (exit 0)",
                        f"exit {as_json.code}, {MIGRATING} mode {team.get('mode')} {team.get('status')}")
            self.ensure(controller.get("state") == "acting" and capacity.get("severity") == "info"
                        and details.get("movedBy") == "controller" and details.get("freedByNamespace") == held
                        and details.get("pendingAloneWithMoves") == 0,
                        f"the report counts on the controller: the {held} GPUs {MIGRATING}'s old pods free are "
                        "enough", f"controller {controller.get('state')}: {json.dumps(capacity)[:400]}")
        self.n.commands("bridge migrate-report", f"xdg-open {html}   # the HTML page, with charts")

    @staticmethod
    def _plan_of(doc: dict[str, Any], namespace: str) -> str:
        """What the report's wave plan says about a namespace, in words (the narration follows the report)."""
        steps = [s for s in doc.get("wavePlan") or [] if s.get("namespace") == namespace]
        if not steps:
            return f"The wave plan has no wave for {namespace}: it stays on the device plugin."
        waves = ", ".join(f"wave {s.get('wave')} to {s.get('mode')} ({s.get('reason')})" for s in steps)
        return (f"The wave plan has {namespace} too ({waves}): ready to move whenever its team wants; this demo "
                "keeps it on the device plugin.")

    def shadow(self) -> None:
        self.step(f"{MIGRATING} in shadow mode: a dry run on real traffic")
        self.ran(self.cmd.namespace_set(MIGRATING, "shadow"))
        self.next_second()
        (pod,) = create_all(self.api, [gpu_pod(MIGRATING, "probe-a", 1, job_seconds=self.t.job_seconds)])
        record = json.loads((pod["metadata"].get("annotations") or {}).get(SHADOW_ANNOTATION) or "null")
        self.n.label("What happened", f"New pods in {MIGRATING} now pass the webhook, which computes the DRA "
                     f"translation and only records it, in the annotation {SHADOW_ANNOTATION}. The pod probe-a "
                     "asked for 1 GPU and got this record:")
        self.n.block(json.dumps(record, indent=2), indent=6, limit=24)
        self.ensure(record is not None, f"probe-a carries the {SHADOW_ANNOTATION} annotation", "no annotation")
        self.ensure(pod_api(pod) == "legacy" and not pod["spec"].get("resourceClaims"),
                    "probe-a itself is unchanged: it still asks nvidia.com/gpu", json.dumps(pod["spec"])[:300])
        watch = self.run_pods(MIGRATING, ["probe-a"])
        self.n.label("And", f"probe-a ran on {watch.nodes['probe-a']} through the device plugin, as before the "
                     "flip. `bridge namespace status` sums up what shadow mode saw:")
        self.ran(self.cmd.namespace_status(MIGRATING))
        self.n.commands(f"kubectl get pod -n {MIGRATING} probe-a -o "
                        "jsonpath='{.metadata.annotations.dra-bridge\\.io/shadow-translation}'",
                        f"bridge namespace status {MIGRATING}")

    def dra(self) -> None:
        self.step(f"{MIGRATING} on DRA: new pods get DRA devices, old pods keep theirs")
        before = self.sides()
        since = time.time()
        self.ran(self.cmd.namespace_set(MIGRATING, "dra"))
        self.next_second()
        names = ["train-a-v2", "batch-a-0", "batch-a-1"]
        created = create_all(self.api, [gpu_pod(MIGRATING, "train-a-v2", 2)] +
                             [gpu_pod(MIGRATING, n, 1, job_seconds=self.t.job_seconds) for n in names[1:]])
        claims = {p["metadata"]["name"]: [c.get("resourceClaimTemplateName") or c.get("resourceClaimName")
                                          for c in p["spec"].get("resourceClaims") or []] for p in created}
        self.n.label("What happened", f"The same kind of pods as before (train-a-v2 asks nvidia.com/gpu: 2, two "
                     "batch jobs 1 each) were rewritten by the webhook on the way in: no nvidia.com/gpu any more, a "
                     "ResourceClaimTemplate for exactly that many devices of the DeviceClass gpu.dra-bridge.io "
                     f"instead ({', '.join(f'{k}: {v[0] if v else None}' for k, v in claims.items())}).")
        self.ensure(all(pod_api(p) == "dra" and claims[p["metadata"]["name"]] for p in created),
                    "the webhook translated every new pod to a ResourceClaim",
                    json.dumps({k: v for k, v in claims.items()}))
        self.ensure(sum(s.dra for s in before.values()) == 0, "no GPU served DRA when they arrived", str(before))
        self.n.say("No GPU served DRA yet, so they were Pending, and the controller saw pending DRA demand next to "
                   "free legacy GPUs. It set each node's split (the annotation dra-bridge.io/dra-devices) and the "
                   "node daemons moved free GPUs, never one a pod holds:")
        watch = self.run_pods(MIGRATING, names)
        for node, reason in self.decisions_since(since, "to-dra"):
            self.n.say(f"{node}: {reason}", indent=4)
        self.ensure(bool(self.decisions_since(since, "to-dra")),
                    "the controller moved GPUs to DRA (a decision recorded on a Node)", "no to-dra decision")
        self.n.table(["POD", "NODE", "API", "DEVICE (pool/device)", "RUNNING AFTER"],
                     [[f"{MIGRATING}/{n}", watch.nodes[n], "DRA",
                       " ".join(f"{p}/{d}" for p, d in watch.dra_devices.get(n, [])), f"{watch.running_after[n]:.1f}s"]
                      for n in names])
        wanted = {"train-a-v2": 2, "batch-a-0": 1, "batch-a-1": 1}
        got = {n: len(watch.dra_devices.get(n, [])) for n in names}
        self.ensure(got == wanted, "each new pod runs on DRA devices of the bridge, as many as it asked for",
                    str(got))
        self.untouched()

        def moved_in_status() -> dict[str, Sides] | None:
            # each daemon's split status is written after its moves end (at most once a second): the pods can be
            # Running on their DRA devices a moment before the status says the moves are done
            sides = self.sides()
            done = sum(s.dra for s in sides.values()) - sum(s.dra for s in before.values()) >= 4
            return sides if done and all(v.withdrawn == 0 for v in sides.values()) else None

        try:
            after = wait_for("the split status to show the GPUs moved to DRA", moved_in_status, self.t.bound)
        except WaitFailed:
            after = self.sides()  # told below, with what the status says
        self.n.label("GPUs per side now", "(from the split status each node daemon publishes)")
        self.sides_table(after)
        moved = sum(s.dra for s in after.values()) - sum(s.dra for s in before.values())
        self.ensure(moved >= 4, "at least 4 GPUs moved to the DRA side", f"{moved}")
        changed = self.decisions_since(since, "to-dra")[0][0]  # a node the controller moved GPUs on
        self.n.commands(f"kubectl get resourceclaims -n {MIGRATING}",
                        "kubectl get events -A --field-selector reason=SplitTargetChanged",
                        f"kubectl get node {changed} -o "
                        "jsonpath='{.metadata.annotations.dra-bridge\\.io/split-decision}'",
                        f"bridge node status {changed}")

    def demand_shifts(self) -> None:
        self.step(f"Demand shifts: {STAYING} needs GPUs back on the legacy side")
        self.wait("team-a's batch jobs to finish",
                  lambda: all(phase(self._pod(MIGRATING, n)) == "Succeeded" for n in ("batch-a-0", "batch-a-1")))
        sides = self.settled()
        free = self._free(sides)
        self.n.label("What happened", f"team-a's two batch jobs finished, so {free['dra']} DRA GPUs are free; the "
                     f"legacy side has {free['legacy']} free. Now {STAYING} starts a sweep of "
                     f"{free['legacy'] + free['dra']} one-GPU pods through the device plugin: more than the legacy "
                     "side has free.")
        self.ensure(free["dra"] >= 1, "the finished jobs' GPUs are free on the DRA side", str(free))
        count = free["legacy"] + free["dra"]
        names = [f"sweep-b-{i}" for i in range(count)]
        since = time.time()
        create_all(self.api, [gpu_pod(STAYING, n, 1) for n in names])
        self.run_pods(STAYING, names)
        back = self.decisions_since(since, "to-legacy")
        self.n.say("The sweep pods that did not fit waited while the controller moved the free DRA GPUs back (a "
                   f"node that just moved GPUs to DRA waits out the {self.t.cooldown:g}s cool-down first, so splits "
                   "do not flap):")
        for node, reason in back:
            self.n.say(f"{node}: {reason}", indent=4)
        self.ensure(bool(back), "the controller moved GPUs back to the legacy side", "no to-legacy decision")
        after = self.settled()
        self.sides_table(after)
        self.ensure(sum(s.dra for s in after.values()) == sum(s.dra for s in sides.values()) - free["dra"],
                    f"all {free['dra']} free DRA GPUs went back to legacy", str(after))
        self.untouched()
        self.n.commands(f"kubectl get pods -n {STAYING} -o wide",
                        "kubectl get events -A --field-selector reason=SplitTargetChanged")

    def replace_old_pods(self) -> None:
        self.step(f"Finishing {MIGRATING}: its old pods are replaced and come back on DRA, as the report said")
        olds = [name for ns, name in self.old if ns == MIGRATING]
        for name in olds:
            self.api.delete(PODS, name, MIGRATING)
        self.wait("the old pods to be gone", lambda: all(self._pod(MIGRATING, n) is None for n in olds))
        for key in [k for k in self.old if k[0] == MIGRATING]:
            del self.old[key]
        recreated = {"train-a": 2, "infer-a": 1}
        since = time.time()
        # One at a time, the larger first, each once the scheduler placed the one before. The scheduler does not know
        # which pod the controller moved GPUs for: created together, infer-a may take one of the 2 GPUs moved to DRA
        # on train-a's node, and then no node has 2 free for train-a (seen with the scheduler stand-in that retries
        # pods only on the events kube-scheduler retries them on).
        for name, gpus in recreated.items():
            create_all(self.api, [gpu_pod(MIGRATING, name, gpus)])
            self.wait(f"{name} to be scheduled", lambda n=name: ((self._pod(MIGRATING, n) or {}).get("spec") or {})
                      .get("nodeName"))
        self.n.label("What happened", f"Running pods are never changed by a flip, so {MIGRATING}'s first pods "
                     "(train-a, infer-a) kept their device-plugin GPUs until now. A rollout replaced them (deleted "
                     "and created again, one at a time, as a Deployment does): the new ones were translated, the "
                     "GPUs the old ones freed moved to DRA, and they run on DRA devices:")
        watch = self.run_pods(MIGRATING, list(recreated))
        self.n.table(["POD", "NODE", "API", "DEVICE (pool/device)"],
                     [[f"{MIGRATING}/{n}", watch.nodes[n], "DRA",
                       " ".join(f"{p}/{d}" for p, d in watch.dra_devices.get(n, []))] for n in recreated])
        got = {n: len(watch.dra_devices.get(n, [])) for n in recreated}
        self.ensure(got == recreated, "the replaced pods run on DRA devices", str(got))
        moved = self.decisions_since(since, "to-dra")
        for node, reason in moved:
            self.n.say(f"{node}: {reason}", indent=4)
        self.ensure(bool(moved), "the controller moved the freed GPUs to DRA", "no to-dra decision")
        left = [p["metadata"]["name"] for p in self.api.list(PODS, MIGRATING)["items"]
                if pod_api(p) == "legacy" and phase(p) in ("Pending", "Running")]
        self.ensure(not left, f"no pod of {MIGRATING} uses the device plugin any more", ", ".join(left))
        # The pods can run on their DRA devices a moment before the last moves end and the split status says so:
        # the summary (and `summary.json`) reports the split at rest.
        self.settled()
        self.untouched()
        self.n.commands(f"kubectl get pods -n {MIGRATING} -o wide", f"kubectl get resourceclaims -n {MIGRATING}")

    # -- reads --------------------------------------------------------------------------------------------------

    def _pod(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.api.get(PODS, name, namespace)
        except NotFound:
            return None

    def _free(self, sides: dict[str, Sides]) -> dict[str, int]:
        """Free GPUs per side: the side's GPUs minus those its running pods hold (PodResources and claims)."""
        held = {"legacy": 0, "dra": 0}
        for pod in self.api.list(PODS)["items"]:
            which = pod_api(pod)
            if which is None or phase(pod) not in ("Pending", "Running") or not pod["spec"].get("nodeName"):
                continue
            if which == "legacy":
                held["legacy"] += sum(int((c.get("resources") or {}).get("limits", {}).get("nvidia.com/gpu", 0))
                                      for c in pod["spec"]["containers"])
            else:
                held["dra"] += len(claim_devices(self.api, pod))
        return {"legacy": sum(s.legacy for s in sides.values()) - held["legacy"],
                "dra": sum(s.dra for s in sides.values()) - held["dra"]}

    def summary(self) -> dict[str, Any]:
        pods = pods_per_api(self.api)
        sides = self.sides()
        return {
            "pods": {api: dict(sorted(c.items())) for api, c in pods.items()},
            "gpus": {node: {"legacy": s.legacy, "dra": s.dra, "withdrawn": s.withdrawn} for node, s in sides.items()},
            # pod starts whose NodePrepareResources failed: each one left its pod Pending until the kubelet's next
            # resync (60-90 s on a real node)
            "prepareFailures": [{"pod": f.pod, "message": f.message, "retryIn": round(f.retry_in, 1)}
                                for f in self.c.prepare_failures()],
        }


def _epoch(rfc3339: str) -> float:
    import datetime as dt

    try:
        return dt.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
