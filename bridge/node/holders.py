"""Gathering the holders of both sides from every source the real node has (the I/O half of `bridge.ledger.holders`).

legacy (device plugin):
* the kubelet's PodResources `List`: app containers and sidecars holding our resource (`CONTAINER`);
* non-restartable init containers, which PodResources omits. Chosen: **both** sources together, the kubelet's
  device-manager checkpoint (`bridge.node.kubeletcheckpoint`, read-only) for *which* device IDs each (pod UID,
  container) got, and the pods bound to this node (`bridge.node.nodepods`) for *whether* that container can still
  be running (pod not ended, init container not terminated). Neither alone is enough: the pod says an init
  container asks for 2 GPUs but not which, and the checkpoint names the GPUs but keeps entries of pods that ended
  (the kubelet prunes them lazily) and has no container states. An init container that has not terminated in a pod
  that has not ended holds the IDs its checkpoint entry lists (`INIT_CONTAINER`). Checkpoint entries of pods the
  pod watch has not seen are held for `stale_after_s` (a pod is bound before the kubelet admits it, so the watch
  sees it within its latency; after that the entry is a leftover). Entries of pods the watch saw deleted are
  leftovers at once, unless the kubelet still lists the pod as active in PodResources (a force-deleted pod whose
  containers still run): the kubelet rewrites the file only at its next Allocate or ListAndWatch update
  (kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go `writeCheckpoint`), so an ended pod's entry can
  outlive it by hours on a quiet node, and holding its GPU for `stale_after_s` would refuse a prepare that the
  kubelet then retries only at its next pod resync (60-90 s). When such an init container exists and the
  checkpoint is missing, the legacy side is **unknown**; when the checkpoint exists but cannot be used (not a
  regular file, over its size limit, nested too deeply, not its format: `bridge.node.kubeletcheckpoint` reads it
  bounded), the legacy side is unknown whatever runs, logged once per change of the problem;
* Allocates we answered but PodResources does not show yet: recorded by the ledger itself (`guard_allocate`);
* pods bound to this node (or nominated to it) that ask for our resource and that the kubelet has not admitted
  yet: no device of theirs in PodResources or in the kubelet's checkpoint, which the kubelet writes in the
  admission's Allocate. They hold a count, not devices (`Facts.admitting`, `ADMITTING`): the ledger keeps that many
  free legacy devices for them (`bridge.ledger.ledger`). A nominated pod that DRA serves through its extended
  resource (`extended_pending`) asks nothing of the device plugin.

DRA:
* our prepared-claim records (the checkpoint: every device this node prepared, `PrepareStarted` included);
* PodResources' DRA devices of our driver and pool (a running container's claim, also after a lost checkpoint);
* every claim allocated to a device of this node's pool, from the pods bound to this node and the pods nominated
  to it (`ALLOCATED`), whether prepared or not;
* a pod nominated to this node whose claim is not allocated yet, or that asks for an extended resource the
  scheduler serves through DRA here and has no claim for it yet (`INCOMING`, on every device: the scheduler may
  write any of them in PreBind; see `bridge.node.nodepods`). A bound pod's unallocated claim is not one: the
  scheduler allocates before it binds, so nothing will allocate it (a pod with a preset `nodeName` never runs);
* prepares in progress: recorded by the ledger itself (`guard_prepare`).

Unknown means do not move: a missing PodResources socket, a PodResources call that fails, a pod watch that is not
synced or is down, a claim that cannot be read, and, for a pod nominated here that asks for an extended resource
name, DeviceClasses not listed or a Node not read (whether DRA serves that name here) each make their side
unknown, with the reason.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from bridge.inventory.model import DeviceID, GpuDevice
from bridge.ledger.holders import Facts, Holder, HolderKind
from bridge.ledger.sides import Side, device_name
from bridge.node import kubeletcheckpoint
from bridge.node.nodepods import NodePods, PodsSnapshot, waits_for_allocation
from bridge.node.podresources import AdoptionError, Holdings, PodResourcesLister

Prepared = Callable[[], Iterable[tuple[DeviceID, Holder]]]
log = logging.getLogger(__name__)


class HolderSources:
    def __init__(self, devices: Sequence[GpuDevice], *, resource_name: str, driver: str, node_name: str,
                 podresources_socket: str | Path, kubelet_checkpoint: str | Path, pods: NodePods | None,
                 prepared: Prepared = lambda: (), timeout_s: float = 5.0, stale_after_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.resource_name = resource_name
        self.driver = driver
        self.node_name = node_name
        self.podresources_socket = str(podresources_socket)
        self._lister = PodResourcesLister(self.podresources_socket)  # one kept channel for every evaluation
        self.kubelet_checkpoint = Path(kubelet_checkpoint)
        self.pods = pods
        self.prepared = prepared
        self.timeout_s = timeout_s
        self.stale_after_s = stale_after_s
        self.clock = clock
        self._uuids = {str(g.uuid): g.uuid for g in devices}
        self._by_name = {device_name(g): g.uuid for g in devices}
        self._first_seen: dict[tuple[str, str], float] = {}
        self._told_checkpoint = ""  # the kubelet checkpoint problem last logged ("" = none)

    # ---- public ------------------------------------------------------------------------------------------------

    def facts(self, *, fresh_claims: bool = False) -> Facts:
        """Both sides. `fresh_claims`: read every claim again first (before a device leaves the DRA side)."""
        if self.pods is not None:
            self.pods.refresh_claims(every=fresh_claims)
        holdings, why = self._podresources()
        snap = self.pods.snapshot() if self.pods is not None else None
        legacy = self._legacy(holdings, why, snap)
        dra = self._dra(holdings, snap)
        return legacy.merged(dra)

    def wants_poll(self) -> bool:
        """A pod bound or nominated here has a claim that was not allocated when last read: it is read again at each
        evaluation (no claim watch), so evaluations must come."""
        return self.pods is not None and self.pods.waiting_for_claims()

    def legacy_facts(self) -> Facts:
        """The legacy side only (prepare taking a device back from the device plugin)."""
        holdings, why = self._podresources()
        return self._legacy(holdings, why, self.pods.snapshot() if self.pods is not None else None)

    # ---- sources -----------------------------------------------------------------------------------------------

    def _podresources(self) -> tuple[Holdings | None, str]:
        path = self.podresources_socket
        if not os.path.exists(path):
            return None, f"no PodResources socket at {path}: is the kubelet running?"
        try:
            return self._lister.list(self.resource_name, self.driver, self.timeout_s), ""
        except AdoptionError as err:
            return None, str(err)

    def close(self) -> None:
        """Close the PodResources channel (the daemon's stop); a later call would dial again."""
        self._lister.close()

    def _legacy(self, holdings: Holdings | None, why: str, snap: PodsSnapshot | None) -> Facts:
        pairs: list[tuple[DeviceID, Holder]] = []
        unknown: dict[Side, str] = {}
        if holdings is None:
            unknown[Side.LEGACY] = why
        else:
            for raw, holders in holdings.legacy.items():
                uuid = self._uuids.get(raw)
                if uuid is not None:
                    pairs += [(uuid, Holder(HolderKind.CONTAINER, f"pod {h.namespace}/{h.pod} container {h.container}"))
                              for h in holders]
        if snap is None:
            return Facts.build(pairs, unknown)
        if not snap.listed:
            unknown.setdefault(Side.LEGACY, f"init containers cannot be checked: {snap.why}")
            return Facts.build(pairs, unknown)
        running_inits = {(p.uid, c.name): p for p in snap.pods if not p.terminal
                         for c in p.init_containers if not c.terminated}
        try:
            entries = kubeletcheckpoint.read(self.kubelet_checkpoint, self.resource_name)
            problem = "missing" if entries is None else ""
            self._checkpoint_problem("")
        except (kubeletcheckpoint.KubeletCheckpointError, OSError) as err:
            why = self._checkpoint_problem(str(err))
            # Not a missing file (no allocations yet): a file we cannot use. Which GPUs the kubelet handed out that
            # PodResources does not show (init containers, pods the watch has not seen) is unknown: nothing moves.
            unknown.setdefault(Side.LEGACY, f"the kubelet's device-manager checkpoint {self.kubelet_checkpoint} "
                                            f"cannot be read ({why}): which GPUs it names is unknown")
            return Facts.build(pairs, unknown)
        if entries is None:
            if running_inits:
                (uid, name), pod = next(iter(running_inits.items()))
                unknown.setdefault(Side.LEGACY, f"pod {pod.ref} runs init container {name} with "
                                                f"{self.resource_name}, and the kubelet's device-manager checkpoint "
                                                f"{self.kubelet_checkpoint} is {problem}: which GPUs it holds is unknown")
            return Facts.build(pairs, unknown, self._admitting(snap, holdings, ()))
        pods = snap.pod_by_uid()
        now = self.clock()
        seen: set[tuple[str, str]] = set()
        for e in entries:
            key = (e.pod_uid, e.container)
            known = pods.get(e.pod_uid)
            holder: Holder | None = None
            if key in running_inits:
                holder = Holder(HolderKind.INIT_CONTAINER, f"pod {running_inits[key].ref} container {e.container}")
            elif known is not None:
                if not known.terminal and e.container in known.app_containers:
                    holder = Holder(HolderKind.CONTAINER, f"pod {known.ref} container {e.container}")
            elif e.pod_uid in snap.deleted:
                ns, name = snap.deleted[e.pod_uid]
                if holdings is not None and (ns, name) in holdings.active:
                    holder = Holder(HolderKind.CONTAINER, f"pod {ns}/{name} container {e.container} (deleted, still "
                                                          "active in the kubelet)")
            else:
                seen.add(key)
                if now - self._first_seen.setdefault(key, now) < self.stale_after_s:
                    holder = Holder(HolderKind.CONTAINER, f"pod UID {e.pod_uid} container {e.container} (in the "
                                                          "kubelet's checkpoint, not yet seen by the pod watch)")
            if holder is not None:
                pairs += [(self._uuids[i], holder) for i in e.device_ids if i in self._uuids]
        for key in [k for k in self._first_seen if k not in seen]:
            del self._first_seen[key]
        return Facts.build(pairs, unknown, self._admitting(snap, holdings, entries))

    @staticmethod
    def _admitting(snap: PodsSnapshot, holdings: Holdings | None,
                   entries: Iterable[kubeletcheckpoint.PodDevicesEntry]) -> list[tuple[Holder, int]]:
        """The pods placed here that will ask the device plugin for GPUs when the kubelet admits them, and how many
        (see the module docstring). Admitted: the kubelet's checkpoint or PodResources names devices of theirs."""
        admitted = {e.pod_uid for e in entries}
        shown = {f"{h.namespace}/{h.pod}" for hs in (holdings.legacy.values() if holdings is not None else ())
                 for h in hs}
        out: list[tuple[Holder, int]] = []
        for pod in snap.pods:
            if pod.legacy_gpus and not pod.terminal and pod.uid not in admitted and pod.ref not in shown:
                out.append((Holder(HolderKind.ADMITTING, f"pod {pod.ref}", pod.ref, pod.uid), pod.legacy_gpus))
        for pod in snap.incoming:
            if pod.legacy_gpus and not pod.terminal and not pod.extended_pending:
                out.append((Holder(HolderKind.ADMITTING, f"pod {pod.ref}, nominated to this node", pod.ref, pod.uid),
                            pod.legacy_gpus))
        return out

    def _checkpoint_problem(self, problem: str) -> str:
        """Log the kubelet checkpoint's problem once per change (it is read on every evaluation); returns it."""
        if problem != self._told_checkpoint:
            if problem:
                log.warning("the kubelet's device-manager checkpoint %s cannot be used: %s; legacy-side holders are "
                            "unknown, so no GPU leaves the legacy side until it can", self.kubelet_checkpoint, problem,
                            extra={"node": self.node_name})
            else:
                log.info("the kubelet's device-manager checkpoint %s is readable again", self.kubelet_checkpoint,
                         extra={"node": self.node_name})
            self._told_checkpoint = problem
        return problem

    def _dra(self, holdings: Holdings | None, snap: PodsSnapshot | None) -> Facts:
        pairs: list[tuple[DeviceID, Holder]] = list(self.prepared())
        unknown: dict[Side, str] = {}
        if holdings is not None:
            for dh in holdings.dynamic:
                uuid = self._by_name.get(dh.device)
                if uuid is not None and dh.pool == self.node_name:
                    pairs.append((uuid, Holder(HolderKind.PREPARED, f"claim {dh.claim_namespace}/{dh.claim_name} "
                                               f"(pod {dh.holder.namespace}/{dh.holder.pod})")))
        if snap is None:
            unknown[Side.DRA] = "no API connection: the claims allocated on this node cannot be read"
        elif not snap.listed or not snap.claims_ok:
            unknown[Side.DRA] = snap.why
        if snap is not None and snap.claims is not None:
            for pod in (*snap.pods, *snap.incoming):
                where = "" if pod.bound else ", nominated to this node"
                for name in pod.claims:
                    cv = snap.claims.get((pod.namespace, name))
                    for dev in cv.devices if cv is not None else ():
                        uuid = self._by_name.get(dev)
                        if uuid is not None:
                            pairs.append((uuid, Holder(HolderKind.ALLOCATED,
                                                       f"claim {pod.namespace}/{name} (pod {pod.ref}{where})",
                                                       pod.ref, pod.uid)))
            for pod in snap.incoming:
                if waits_for_allocation(pod, snap.claims):
                    holder = Holder(HolderKind.INCOMING, f"pod {pod.ref}", pod.ref, pod.uid)
                    pairs += [(uuid, holder) for uuid in self._uuids.values()]
        return Facts.build(pairs, unknown)


def prepared_holders(records: Iterable[tuple[str, str, str, Iterable[str]]]) -> list[tuple[DeviceID, Holder]]:
    """(namespace, name, state, device UUIDs) of our prepared-claim records -> PREPARED holders."""
    return [(DeviceID(u), Holder(HolderKind.PREPARED, f"claim {ns}/{name}"
                                 + (" (prepare in progress)" if state == "PrepareStarted" else "")))
            for ns, name, state, uuids in records for u in uuids]


__all__ = ["HolderSources", "prepared_holders"]
