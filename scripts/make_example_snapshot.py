#!/usr/bin/env python3
"""Writes examples/cluster-snapshot/: a small, realistic GPU cluster in `kubectl get -o yaml` form.

Usage: python scripts/make_example_snapshot.py [OUT_DIR]   (default: examples/cluster-snapshot)

The cluster (Kubernetes 1.34.2, resource.k8s.io/v1 served):
* nodes: two A100 nodes on the vendor device plugin; two H100 nodes run by the bridge (split 6 and all); one
  A100 node with MIG (mixed strategy); one T4 node with time-slicing on cri-dockerd; one L40S node on NVIDIA's
  DRA driver; one CPU node with a stale zero GPU capacity left by a removed device plugin.
* teams: vision (legacy: inference Deployment + training Job, GFD product selector, unpaired quota), nlp (shadow:
  StatefulSet with GFD affinity, nightly fine-tune CronJob with a preempting PriorityClass, paired quota), speech
  (dra: inference Deployment), research (legacy: MIG Deployment, a notebook pod mounting /dev/nvidia0), recsys
  (legacy: time-sliced gpu.shared Deployment, NVIDIA_VISIBLE_DEVICES set by hand), batch (legacy: ready Job).
* agents: NVIDIA device plugin + GFD + dcgm-exporter (gpu-operator), the bridge node daemon (dra-bridge), NVIDIA's
  DRA kubelet plugin (nvidia-dra-driver-gpu), cluster-autoscaler (kube-system); device-plugin ConfigMap with
  default / mig-mixed / time-sliced configs.

Deterministic: no timestamps except fixed creationTimestamps; rerunning produces identical files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
TS = "2026-11-02T09:00:00Z"
UID = iter(f"00000000-0000-4000-8000-{i:012d}" for i in range(1, 10_000))


def meta(name: str, namespace: str | None = None, labels: dict | None = None, owner: Obj | None = None, **extra: Any) -> Obj:
    m: Obj = {"name": name}
    if namespace:
        m["namespace"] = namespace
    m["uid"] = next(UID)
    m["creationTimestamp"] = TS
    if labels:
        m["labels"] = labels
    if owner:
        m["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                 "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                 "controller": True, "blockOwnerDeletion": True}]
    m.update(extra)
    return m


def container(name: str, image: str, gpu: dict[str, int] | None = None, **extra: Any) -> Obj:
    c: Obj = {"name": name, "image": image}
    if gpu:
        c["resources"] = {"limits": {k: str(v) for k, v in gpu.items()}}
    c.update(extra)
    return c


def pod_spec(containers: list[Obj], **extra: Any) -> Obj:
    s: Obj = {"containers": containers}
    s.update(extra)
    return s


# ------------------------------------------------------------------------------------------------- nodes

def gfd(product: str, memory_mib: int, family: str, major: int, minor: int, count: int) -> dict[str, str]:
    return {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": str(minor),
        "nvidia.com/gpu.count": str(count),
    }


def node(name: str, labels: dict[str, str], capacity: dict[str, str], allocatable: dict[str, str], runtime: str) -> Obj:
    base = {"cpu": "96", "memory": "1056Gi", "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": meta(name, labels={"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels}),
        "status": {
            "capacity": {**base, **capacity},
            "allocatable": {**base, **allocatable},
            "nodeInfo": {"containerRuntimeVersion": runtime, "kubeletVersion": "v1.34.2", "osImage": "Ubuntu 24.04",
                         "kernelVersion": "6.8.0-45-generic", "architecture": "amd64", "operatingSystem": "linux",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        },
    }


A100 = gfd("NVIDIA-A100-SXM4-80GB", 81920, "ampere", 8, 0, 8)
H100 = gfd("NVIDIA-H100-80GB-HBM3", 81559, "hopper", 9, 0, 8)
DP = {"nvidia.com/gpu.deploy.device-plugin": "true"}
BRIDGE = {"dra-bridge.io/node": "true"}

NODES = [
    node("gpu-a100-1", {**A100, **DP}, {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"}, "containerd://2.0.4"),
    node("gpu-a100-2", {**A100, **DP}, {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"}, "containerd://1.7.22"),
    node("gpu-h100-1", {**H100, **BRIDGE, "dra-bridge.io/dra-devices": "6"},
         {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "2"}, "containerd://2.0.4"),
    node("gpu-h100-2", {**H100, **BRIDGE, "dra-bridge.io/dra-devices": "all"},
         {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "0"}, "containerd://2.0.4"),
    node("gpu-mig-1", {**gfd("NVIDIA-A100-SXM4-80GB", 81920, "ampere", 8, 0, 4), **DP,
                       "nvidia.com/device-plugin.config": "mig-mixed", "nvidia.com/mig.strategy": "mixed"},
         {"nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "14"}, {"nvidia.com/gpu": "2", "nvidia.com/mig-1g.10gb": "14"},
         "containerd://2.0.4"),
    node("gpu-t4-1", {**gfd("Tesla-T4", 15360, "turing", 7, 5, 4), **DP, "nvidia.com/device-plugin.config": "time-sliced"},
         {"nvidia.com/gpu.shared": "16"}, {"nvidia.com/gpu.shared": "16"}, "docker://24.0.7"),
    node("gpu-l40s-1", {**gfd("NVIDIA-L40S", 46068, "ada-lovelace", 8, 9, 4)}, {}, {}, "containerd://2.0.4"),
    node("cpu-1", {}, {"nvidia.com/gpu": "0"}, {"nvidia.com/gpu": "0"}, "containerd://2.0.4"),
]

# ------------------------------------------------------------------------------------------------- DRA objects


def device(i: int, driver: str, product: str, arch: str, cc: str, mem: str, uuid_seed: str) -> Obj:
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "uuid": {"string": f"GPU-{uuid_seed}-{i:04d}-4000-8000-00000000{i:04d}"},
            "productName": {"string": product},
            "architecture": {"string": arch},
            "cudaComputeCapability": {"version": cc},
            "driverVersion": {"version": "570.124.6"},
            "index": {"int": i},
            "minor": {"int": i},
            "pciBusID": {"string": f"0000:{0x18 + i * 0x10:02x}:00.0"},
            "numaNode": {"int": 0 if i < 4 else 1},
            "migCapable": {"bool": True},
        },
        "capacity": {"memory": {"value": mem}},
    }


def rslice(name: str, driver: str, node_name: str, devices: list[Obj]) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta(name),
            "spec": {"driver": driver, "nodeName": node_name, "pool": {"name": node_name, "generation": 1,
                                                                      "resourceSliceCount": 1}, "devices": devices}}


def h100(i: int, seed: str) -> Obj:
    return device(i, "gpu.dra-bridge.io", "NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", "80Gi", seed)


DRA = [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta("gpu.dra-bridge.io"),
     "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.dra-bridge.io"'}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta("gpu.nvidia.com"),
     "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com" && '
                                                   'device.attributes["gpu.nvidia.com"].type == "gpu"'}}]}},
    rslice("gpu-h100-1-gpu.dra-bridge.io", "gpu.dra-bridge.io", "gpu-h100-1", [h100(i, "a1b2c3d4") for i in range(2, 8)]),
    rslice("gpu-h100-2-gpu.dra-bridge.io", "gpu.dra-bridge.io", "gpu-h100-2", [h100(i, "e5f6a7b8") for i in range(8)]),
    rslice("gpu-l40s-1-gpu.nvidia.com", "gpu.nvidia.com", "gpu-l40s-1", [
        {**(d := device(i, "gpu.nvidia.com", "NVIDIA L40S", "Ada Lovelace", "8.9.0", "45Gi", "c9d0e1f2")),
         "attributes": {**d["attributes"], "type": {"string": "gpu"}}} for i in range(4)]),
]

# ------------------------------------------------------------------------------------------------- namespaces

NAMESPACES = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(n, labels={"kubernetes.io/metadata.name": n, **lab})}
    for n, lab in [
        ("kube-system", {}), ("gpu-operator", {}), ("dra-bridge", {}), ("nvidia-dra-driver-gpu", {}),
        ("team-vision", {"dra-bridge.io/mode": "legacy"}), ("team-nlp", {"dra-bridge.io/mode": "shadow"}),
        ("team-speech", {"dra-bridge.io/mode": "dra"}), ("team-research", {}), ("team-recsys", {}),
        ("team-batch", {}),
    ]
]

PRIORITY = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": meta("training-high"),
             "value": 100000, "preemptionPolicy": "PreemptLowerPriority",
             "description": "Fine-tuning jobs that may preempt batch work"}]

QUOTAS = [
    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("gpu-quota", "team-vision"),
     "spec": {"hard": {"requests.nvidia.com/gpu": "16"}}},
    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("gpu-quota", "team-nlp"),
     "spec": {"hard": {"requests.nvidia.com/gpu": "16", "gpu.dra-bridge.io.deviceclass.resource.k8s.io/devices": "16"}}},
]

DP_CONFIG = {
    "default": "version: v1\nflags:\n  migStrategy: none\n",
    "mig-mixed": "version: v1\nflags:\n  migStrategy: mixed\n",
    "time-sliced": ("version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                    "    failRequestsGreaterThanOne: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"),
}
CONFIGMAPS = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("device-plugin-config", "gpu-operator"),
               "data": DP_CONFIG}]

# ------------------------------------------------------------------------------------------------- workloads

controllers: list[Obj] = []
replicasets: list[Obj] = []
jobs: list[Obj] = []
pods: list[Obj] = []


def running_pod(name: str, ns: str, owner: Obj | None, spec: Obj, node_name: str, labels: dict | None = None,
                phase: str = "Running") -> Obj:
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": meta(name, ns, labels=labels, owner=owner),
         "spec": {**spec, "nodeName": node_name}, "status": {"phase": phase}}
    pods.append(p)
    return p


def deployment(name: str, ns: str, replicas: int, spec: Obj, nodes_: list[str], pod_spec_override: Obj | None = None) -> None:
    labels = {"app": name}
    d = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name, ns, labels=labels),
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": spec}}}
    controllers.append(d)
    rs_name = f"{name}-7c9f8d6b5"
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta(rs_name, ns, labels=labels, owner=d),
          "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                   "template": {"metadata": {"labels": labels}, "spec": spec}}}
    replicasets.append(rs)
    for i in range(replicas):
        running_pod(f"{rs_name}-{'abcdefgh'[i]}x{i}q", ns, rs, pod_spec_override or spec, nodes_[i % len(nodes_)], labels)


TRAIN_IMG = "nvcr.io/nvidia/pytorch:25.10-py3"
SERVE_IMG = "nvcr.io/nvidia/tritonserver:25.10-py3"
A100_SELECTOR = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}

# team-vision (legacy): inference on A100 by product label, a 2-worker training Job
deployment("detector-inference", "team-vision", 2,
           pod_spec([container("triton", SERVE_IMG, {"nvidia.com/gpu": 1})], nodeSelector=A100_SELECTOR),
           ["gpu-a100-1", "gpu-a100-2"])
job_spec = pod_spec([container("trainer", TRAIN_IMG, {"nvidia.com/gpu": 4})], restartPolicy="Never",
                    nodeSelector=A100_SELECTOR)
seg = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("segmentation-train", "team-vision"),
       "spec": {"parallelism": 2, "completions": 2, "template": {"spec": job_spec}}}
jobs.append(seg)
for i, n in enumerate(["gpu-a100-1", "gpu-a100-2"]):
    running_pod(f"segmentation-train-{i}-k2x9p", "team-vision", seg, job_spec, n)

# team-nlp (shadow): LLM server StatefulSet with GFD affinity, nightly fine-tune CronJob
hopper_affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "nvidia.com/gpu.family", "operator": "In", "values": ["hopper"]},
                          {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}]}]}}}
sts_spec = pod_spec([container("vllm", "vllm/vllm-openai:v0.11.0", {"nvidia.com/gpu": 2})], affinity=hopper_affinity)
sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("llm-server", "team-nlp"),
       "spec": {"replicas": 2, "serviceName": "llm-server", "selector": {"matchLabels": {"app": "llm-server"}},
                "template": {"metadata": {"labels": {"app": "llm-server"}}, "spec": sts_spec}}}
controllers.append(sts)
for i in range(2):
    running_pod(f"llm-server-{i}", "team-nlp", sts, sts_spec, "gpu-h100-1", {"app": "llm-server"})
ft_spec = pod_spec([container("finetune", TRAIN_IMG, {"nvidia.com/gpu": 4})], restartPolicy="OnFailure",
                   priorityClassName="training-high", affinity=hopper_affinity)
cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("nightly-finetune", "team-nlp"),
        "spec": {"schedule": "0 1 * * *", "jobTemplate": {"spec": {"template": {"spec": ft_spec}}}}}
controllers.append(cron)
cron_job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("nightly-finetune-29392140", "team-nlp", owner=cron),
            "spec": {"template": {"spec": ft_spec}}}
jobs.append(cron_job)
running_pod("nightly-finetune-29392140-7dl4c", "team-nlp", cron_job, ft_spec, "gpu-h100-2")

# team-speech (dra): pods were translated by the webhook into claims
asr_spec = pod_spec([container("asr", SERVE_IMG, {"nvidia.com/gpu": 1})])
asr_pod_spec = pod_spec([container("asr", SERVE_IMG, resources={"claims": [{"name": "gpu"}]})],
                        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "dra-bridge-gpu-1"}])
deployment("asr-inference", "team-speech", 2, asr_spec, ["gpu-h100-2"], asr_pod_spec)

# team-research (legacy): MIG inference, and a notebook mounting a GPU device node by hand
deployment("embeddings", "team-research", 3,
           pod_spec([container("embed", SERVE_IMG, {"nvidia.com/mig-1g.10gb": 1})]), ["gpu-mig-1"])
running_pod("notebook-alice", "team-research", None, pod_spec(
    [container("jupyter", "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20", securityContext={"privileged": True},
               volumeMounts=[{"name": "nvidia0", "mountPath": "/dev/nvidia0"}])],
    volumes=[{"name": "nvidia0", "hostPath": {"path": "/dev/nvidia0", "type": "CharDevice"}}]), "gpu-a100-1")

# team-recsys (legacy): time-sliced ranking service; a feature job that pins GPUs by env var
deployment("ranker", "team-recsys", 4,
           pod_spec([container("ranker", SERVE_IMG, {"nvidia.com/gpu.shared": 1})]), ["gpu-t4-1"])
feat_spec = pod_spec([container("features", TRAIN_IMG, {"nvidia.com/gpu": 1},
                                env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}])], restartPolicy="Never")
feat = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("feature-backfill", "team-recsys"),
        "spec": {"template": {"spec": feat_spec}}}
jobs.append(feat)
running_pod("feature-backfill-q8w2n", "team-recsys", feat, feat_spec, "gpu-a100-2")

# team-batch (legacy, ready): an embarrassingly parallel evaluation Job
eval_spec = pod_spec([container("eval", TRAIN_IMG, {"nvidia.com/gpu": 1})], restartPolicy="Never")
ev = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("eval-sweep", "team-batch"),
      "spec": {"parallelism": 2, "completions": 16, "template": {"spec": eval_spec}}}
jobs.append(ev)
for i in range(2):
    running_pod(f"eval-sweep-{i}-m3k8z", "team-batch", ev, eval_spec, "gpu-a100-2")
running_pod("eval-sweep-old-x1", "team-batch", ev, eval_spec, "gpu-a100-2", phase="Succeeded")

# ------------------------------------------------------------------------------------------------- agents


def daemonset(name: str, ns: str, labels: dict, spec: Obj, nodes_: list[str]) -> None:
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta(name, ns, labels=labels),
          "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}},
          "status": {"desiredNumberScheduled": len(nodes_), "currentNumberScheduled": len(nodes_),
                     "numberMisscheduled": 0, "numberReady": len(nodes_)}}
    controllers.append(ds)
    for n in nodes_:
        running_pod(f"{name}-{n[-6:].replace('-', '')}", ns, ds, spec, n, labels)


DP_NODES = ["gpu-a100-1", "gpu-a100-2", "gpu-mig-1", "gpu-t4-1"]
daemonset("nvidia-device-plugin-daemonset", "gpu-operator", {"app": "nvidia-device-plugin-daemonset"},
          pod_spec([container("nvidia-device-plugin", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1")],
                   nodeSelector=DP)  , DP_NODES)
daemonset("gpu-feature-discovery", "gpu-operator", {"app": "gpu-feature-discovery"},
          pod_spec([container("gfd", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                              command=["gpu-feature-discovery"])]), DP_NODES + ["gpu-h100-1", "gpu-h100-2", "gpu-l40s-1"])
daemonset("nvidia-dcgm-exporter", "gpu-operator", {"app": "nvidia-dcgm-exporter"},
          pod_spec([container("dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04")]),
          DP_NODES + ["gpu-h100-1", "gpu-h100-2", "gpu-l40s-1"])
daemonset("dra-bridge-node", "dra-bridge", {"app.kubernetes.io/name": "dra-bridge", "app.kubernetes.io/component": "node"},
          pod_spec([container("node", "ghcr.io/dra-bridge/dra-bridge:0.1.0", args=["node"])], nodeSelector=BRIDGE),
          ["gpu-h100-1", "gpu-h100-2"])
daemonset("nvidia-dra-driver-gpu-kubelet-plugin", "nvidia-dra-driver-gpu", {"app": "nvidia-dra-driver-gpu-kubelet-plugin"},
          pod_spec([container("gpus", "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0")],
                   nodeSelector={"kubernetes.io/hostname": "gpu-l40s-1"}), ["gpu-l40s-1"])
ca = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("cluster-autoscaler", "kube-system"),
      "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "cluster-autoscaler"}},
               "template": {"metadata": {"labels": {"app": "cluster-autoscaler"}}, "spec": pod_spec(
                   [container("cluster-autoscaler", "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.1",
                              command=["./cluster-autoscaler", "--cloud-provider=clusterapi",
                                       "--balance-similar-node-groups"])])}}}
controllers.append(ca)


def as_list(items: list[Obj]) -> Obj:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "nodes.yaml": NODES, "namespaces.yaml": NAMESPACES, "priorityclasses.yaml": PRIORITY,
        "resourcequotas.yaml": QUOTAS, "configmaps.yaml": CONFIGMAPS, "dra.yaml": DRA,
        "controllers.yaml": controllers + replicasets + jobs, "pods.yaml": pods,
    }
    for name, items in files.items():
        (out / name).write_text(yaml.safe_dump(as_list(items), sort_keys=False, width=120))
    (out / "version.json").write_text(json.dumps(
        {"serverVersion": {"major": "1", "minor": "34", "gitVersion": "v1.34.2", "platform": "linux/amd64"}},
        indent=2) + "\n")
    groups = ["v1", "apps/v1", "batch/v1", "scheduling.k8s.io/v1", "admissionregistration.k8s.io/v1",
              "resource.k8s.io/v1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2"]
    (out / "api-versions.txt").write_text("\n".join(sorted(groups)) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "examples" / "cluster-snapshot"))
