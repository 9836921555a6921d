"""A stand-in external volume provisioner for tests on the real backend: it binds `WaitForFirstConsumer` claims late.

Nothing here can provision real storage (no CSI driver, no cloud), and the point is the delay: the real
kube-scheduler's VolumeBinding PreBind waits for the claim to be bound (up to `bindTimeoutSeconds`, 600 s), with the
pod nominated to its node and not bound. This provisioner plays the part of an external provisioner
(kubernetes-sigs/sig-storage-lib-external-provisioner) slowly, and the real kube-controller-manager does the rest:

1. the scheduler picks a node and, in PreBind, annotates the PVC `volume.kubernetes.io/selected-node: <node>`
   (pkg/scheduler/framework/plugins/volumebinding/binder.go `bindAPIUpdate`);
2. the PV controller sees a delayed-binding claim with a selected node and a StorageClass whose provisioner is not
   in-tree, annotates it `volume.kubernetes.io/storage-provisioner: <provisioner>` and waits ("Waiting for a volume
   to be created either by the external provisioner ...", pkg/controller/volume/persistentvolume/pv_controller.go
   `provisionClaimOperationExternal`);
3. this provisioner, `delay_s` after it first sees such a claim, creates a PersistentVolume for it as the library
   does: `spec.claimRef` naming the claim (uid included), the class, the requested capacity and access modes,
   `pv.kubernetes.io/provisioned-by`, and node affinity to the selected node: a `hostPath` directory on that node
   (`DirectoryOrCreate` under the node's /var/lib, which is the node's own directory on the sandbox);
4. the PV controller binds the claim to that volume (`syncVolume`: a volume whose claimRef names an unbound claim),
   VolumeBinding's PreBind sees it bound at its next check (every second), and the binding cycle goes on.

The volumes are `Retain`ed: `stop()` leaves them; the test that made them deletes them (or the cluster goes).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from bridge.kube.api import KubeAPI, Obj, Resource, WatchEvent
from bridge.kube.errors import AlreadyExists, KubeError
from bridge.kube.watch import Informer

log = logging.getLogger(__name__)

PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True)
PVS = Resource("", "v1", "persistentvolumes", "PersistentVolume", False)
STORAGE_CLASSES = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", False)

SELECTED_NODE = "volume.kubernetes.io/selected-node"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def storage_class(name: str, provisioner: str) -> Obj:
    """A StorageClass whose claims are bound only once a pod using them is scheduled (`WaitForFirstConsumer`)."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer", "reclaimPolicy": "Retain"}


def claim(name: str, storage_class_name: str, size: str = "1Mi") -> Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"storageClassName": storage_class_name, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": size}}}}


@dataclass
class Provisioned:
    """One claim this provisioner served: when it first saw it waiting for it (monotonic), when it created the
    volume, the volume's name and the node the scheduler selected."""

    claim: str
    node: str
    seen_at: float
    created_at: float = 0.0
    volume: str = ""


class LateProvisioner:
    """`with LateProvisioner(api, "sandbox.dra-bridge.io/late-local", delay_s=15) as p:` ... `p.provisioned`."""

    def __init__(self, api: KubeAPI, name: str, *, delay_s: float) -> None:
        self.api = api
        self.name = name
        self.delay_s = delay_s
        self.provisioned: dict[str, Provisioned] = {}  # "namespace/name" -> what was done
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._informer = Informer(api, PVCS, on_event=self._on_event)

    def __enter__(self) -> LateProvisioner:
        self._threads.append(self._informer.start(self._stop))
        if not self._informer.wait_synced(30):
            self.__exit__()
            raise TimeoutError("the provisioner's PersistentVolumeClaim watch did not sync in 30 s")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def _on_event(self, ev: WatchEvent) -> None:
        pvc = ev.object
        if ev.type == "DELETED":
            return
        meta = pvc.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if annotations.get(STORAGE_PROVISIONER) != self.name or not annotations.get(SELECTED_NODE):
            return  # not ours, or not scheduled yet (WaitForFirstConsumer)
        if (pvc.get("spec") or {}).get("volumeName"):
            return  # bound already
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        with self._lock:
            if key in self.provisioned:
                return
            record = self.provisioned[key] = Provisioned(key, str(annotations[SELECTED_NODE]), time.monotonic())
        t = threading.Thread(target=self._provision_later, args=(pvc, record), name=f"provision-{key}", daemon=True)
        self._threads.append(t)
        t.start()

    def _provision_later(self, pvc: Obj, record: Provisioned) -> None:
        if self._stop.wait(self.delay_s):
            return
        pv = self._volume(pvc, record.node)
        try:
            self.api.create(PVS, pv)
        except AlreadyExists:
            pass
        except KubeError as err:
            log.error("the stand-in provisioner could not create %s for %s: %s", pv["metadata"]["name"],
                      record.claim, err.message)
            return
        record.created_at, record.volume = time.monotonic(), str(pv["metadata"]["name"])
        log.info("provisioned %s for %s on %s after %.1f s", record.volume, record.claim, record.node,
                 record.created_at - record.seen_at)

    def _volume(self, pvc: Obj, node: str) -> Obj:
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        name = f"pvc-{meta['uid']}"
        affinity: dict[str, Any] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
        return {
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: self.name}},
            "spec": {
                "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Mi")},
                "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": spec.get("storageClassName", ""),
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                             "name": meta["name"], "uid": meta["uid"]},
                "hostPath": {"path": f"/var/lib/late-volumes/{name}", "type": "DirectoryOrCreate"},
                "nodeAffinity": affinity,
            },
        }


__all__ = ["LateProvisioner", "PVCS", "PVS", "Provisioned", "STORAGE_CLASSES", "claim", "storage_class"]
