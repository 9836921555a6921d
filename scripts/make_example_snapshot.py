#!/usr/bin/env python3
"""Writes examples/cluster-snapshot/: a small, realistic GPU cluster in `kubectl get -o yaml` form.

Usage: python scripts/make_example_snapshot.py [OUT_DIR]   (default: examples/cluster-snapshot)

The cluster (Kubernetes 1.36.2 in the middle of an upgrade from 1.35, resource.k8s.io/v1 served):
* nodes: two A100 nodes on the vendor device plugin (one kubelet still 1.35); three nodes run by the bridge, each
  with the split status its node daemon writes and a state the daemon can produce (no GPU both in a ResourceSlice
  and held by a device-plugin pod): two H100 (split 0, every GPU held by legacy pods; split 6, two GPUs held by
  legacy pods and two of the six DRA GPUs by claims) and one L4 whose GFD is an older release (it labels 8.9
  `ampere`, 8 GPUs all on DRA); one A100 node with MIG
  under the GPU Operator's default MIG strategy `single` (each slice is `nvidia.com/gpu`); two T4 nodes with
  time-slicing, one renamed (`nvidia.com/gpu.shared`, on cri-dockerd, kubelet 1.35) and one not (`nvidia.com/gpu`
  is a quarter of a T4 there); one L40S node on NVIDIA's DRA driver; one CPU node with a stale zero GPU capacity
  left by a removed device plugin.
* teams: vision (legacy: inference Deployment + training Job with a GFD product selector, a batch Job selecting
  family `ampere`, an unpaired quota while other teams share the GPUs), nlp (shadow: StatefulSet with GFD
  affinity, nightly fine-tune CronJob with a preempting PriorityClass (its last run complete), an RL sweep on
  Volcano, paired quota),
  speech (dra: inference Deployment whose pods the webhook translated: its ResourceClaimTemplate and their
  allocated claims), research (legacy: embeddings on the MIG node, a CronJob still asking
  `nvidia.com/mig-1g.10gb` from the days of the mixed strategy, a notebook mounting /dev/nvidia0, a debugger pinned
  with nodeName), recsys (legacy: time-sliced gpu.shared ranker, a reranker on the un-renamed time-sliced node,
  NVIDIA_VISIBLE_DEVICES set by hand), batch (legacy: ready Job with a GPU warm-up init container), rl (legacy:
  jobs admitted by Kueue through a ClusterQueue that budgets `nvidia.com/gpu`).
* agents: NVIDIA device plugin + GFD + dcgm-exporter under the GPU Operator (ClusterPolicy: MIG strategy single,
  device-plugin configs in `device-plugin-config`: default / mig-mixed / time-sliced / time-sliced-inference), the
  bridge node daemon (dra-bridge), NVIDIA's DRA kubelet plugin (nvidia-dra-driver-gpu), cluster-autoscaler
  (kube-system), Kueue's queues; kube-scheduler's leader-election Lease (no `bridge controller` runs: the report
  says the split must be raised by hand).

The custom resources (ClusterPolicy, ClusterQueue, LocalQueue) are in `crds.yaml.gz`, gzipped as a large export
would be: the API emulator (`bridge sandbox apiserver --load`) serves none of these CRDs and reads no `.gz` file,
so loading this directory there still loads every built-in object, while `migrate-report --snapshot` reads all.

Deterministic: no timestamps except fixed creationTimestamps; rerunning produces identical files.
"""

from __future__ import annotations

import gzip
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


def node(name: str, labels: dict[str, str], capacity: dict[str, str], allocatable: dict[str, str], runtime: str,
         kubelet: str = "v1.36.2") -> Obj:
    base = {"cpu": "96", "memory": "1056Gi", "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": meta(name, labels={"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels}),
        "status": {
            "capacity": {**base, **capacity},
            "allocatable": {**base, **allocatable},
            "nodeInfo": {"containerRuntimeVersion": runtime, "kubeletVersion": kubelet, "osImage": "Ubuntu 24.04",
                         "kernelVersion": "6.8.0-45-generic", "architecture": "amd64", "operatingSystem": "linux",
                         "kubeProxyVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        },
    }


A100 = gfd("NVIDIA-A100-SXM4-80GB", 81920, "ampere", 8, 0, 8)
H100 = gfd("NVIDIA-H100-80GB-HBM3", 81559, "hopper", 9, 0, 8)
DP = {"nvidia.com/gpu.deploy.device-plugin": "true"}
BRIDGE = {"dra-bridge.io/node": "true"}

L4_OLD_GFD = gfd("NVIDIA-L4", 23034, "ampere", 8, 9, 8)  # GFD before v0.18.0 calls every 8.x ampere
MIG_SINGLE = {**gfd("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", 9728, "ampere", 8, 0, 28), "nvidia.com/mig.strategy": "single",
              "nvidia.com/mig.capable": "true", "nvidia.com/mig.config": "all-1g.10gb"}
T4_SHARED = {**gfd("Tesla-T4-SHARED", 15360, "turing", 7, 5, 4), "nvidia.com/gpu.replicas": "4",
             "nvidia.com/gpu.sharing-strategy": "time-slicing"}

NODES = [
    node("gpu-a100-1", {**A100, **DP}, {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"}, "containerd://2.0.4"),
    node("gpu-a100-2", {**A100, **DP}, {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"}, "containerd://1.7.22",
         kubelet="v1.35.4"),
    node("gpu-h100-1", {**H100, **BRIDGE, "dra-bridge.io/dra-devices": "0"},
         {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "8"}, "containerd://2.0.4"),
    node("gpu-h100-2", {**H100, **BRIDGE, "dra-bridge.io/dra-devices": "6"},
         {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "2"}, "containerd://2.0.4"),
    node("gpu-l4-1", {**L4_OLD_GFD, **BRIDGE, "dra-bridge.io/dra-devices": "all"},
         {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "0"}, "containerd://2.0.4"),
    node("gpu-mig-1", {**MIG_SINGLE, **DP, "nvidia.com/device-plugin.config": "mig-mixed"},
         {"nvidia.com/gpu": "28"}, {"nvidia.com/gpu": "28"}, "containerd://2.0.4"),
    node("gpu-t4-1", {**gfd("Tesla-T4", 15360, "turing", 7, 5, 4), **DP, "nvidia.com/device-plugin.config": "time-sliced"},
         {"nvidia.com/gpu.shared": "16"}, {"nvidia.com/gpu.shared": "16"}, "docker://24.0.7", kubelet="v1.35.4"),
    node("gpu-t4-2", {**T4_SHARED, **DP, "nvidia.com/device-plugin.config": "time-sliced-inference"},
         {"nvidia.com/gpu": "16"}, {"nvidia.com/gpu": "16"}, "containerd://2.0.4"),
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


def l4(i: int) -> Obj:
    return device(i, "gpu.dra-bridge.io", "NVIDIA L4", "Ada Lovelace", "8.9.0", "23034Mi", "b1c2d3e4")


DRA = [
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta("gpu.dra-bridge.io"),
     "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.dra-bridge.io"'}}]}},
    {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta("gpu.nvidia.com"),
     "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com" && '
                                                   'device.attributes["gpu.nvidia.com"].type == "gpu"'}}]}},
    rslice("gpu-h100-1-gpu.dra-bridge.io", "gpu.dra-bridge.io", "gpu-h100-1", []),  # the pool, every GPU legacy
    rslice("gpu-h100-2-gpu.dra-bridge.io", "gpu.dra-bridge.io", "gpu-h100-2", [h100(i, "e5f6a7b8") for i in range(2, 8)]),
    rslice("gpu-l4-1-gpu.dra-bridge.io", "gpu.dra-bridge.io", "gpu-l4-1", [l4(i) for i in range(8)]),
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
        ("team-batch", {}), ("team-rl", {}), ("kueue-system", {}),
    ]
]

PRIORITY = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": meta("training-high"),
             "value": 100000, "preemptionPolicy": "PreemptLowerPriority",
             "description": "Fine-tuning jobs that may preempt batch work"}]

QUOTAS = [
    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("gpu-quota", "team-vision"),
     "spec": {"hard": {"requests.nvidia.com/gpu": "16"}}},
    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta("gpu-quota", "team-nlp"),
     "spec": {"hard": {"requests.nvidia.com/gpu": "16", "gpu.dra-bridge.io.deviceclass.resource.k8s.io/devices": "16",
                       "requests.deviceclass.resource.kubernetes.io/gpu.dra-bridge.io": "16"}}},
]

DP_CONFIG = {
    "default": "version: v1\nflags:\n  migStrategy: none\n",
    "mig-mixed": "version: v1\nflags:\n  migStrategy: mixed\n",
    "time-sliced": ("version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n    renameByDefault: true\n"
                    "    failRequestsGreaterThanOne: true\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"),
    # No rename: the plugin advertises every T4 four times as nvidia.com/gpu itself.
    "time-sliced-inference": ("version: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n"
                              "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n"),
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
            "spec": {"template": {"spec": ft_spec}},
            "status": {"succeeded": 1, "startTime": "2026-11-02T01:00:04Z", "completionTime": "2026-11-02T04:41:37Z",
                       "conditions": [{"type": "Complete", "status": "True"}]}}
jobs.append(cron_job)
running_pod("nightly-finetune-29392140-7dl4c", "team-nlp", cron_job, ft_spec, "gpu-h100-2", phase="Succeeded")

# team-speech (dra): pods were translated by the webhook into claims
asr_spec = pod_spec([container("asr", SERVE_IMG, {"nvidia.com/gpu": 1})])
ASR_TEMPLATE = "dra-bridge-gpu-1-fd1f7326"  # bridge.webhook.translate.template_name(1, "gpu.dra-bridge.io", "")
asr_pod_spec = pod_spec([container("asr", SERVE_IMG, resources={"claims": [{"name": "gpu"}]})],
                        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": ASR_TEMPLATE}])
deployment("asr-inference", "team-speech", 2, asr_spec, ["gpu-h100-2"], asr_pod_spec)

# team-research (legacy): embeddings on the MIG node (nvidia.com/gpu: 1 is one 1g.10gb slice there), a CronJob
# still written for the mixed strategy, a notebook mounting a GPU device node by hand, a debugger pinned by nodeName
deployment("embeddings", "team-research", 3,
           pod_spec([container("embed", SERVE_IMG, {"nvidia.com/gpu": 1})]), ["gpu-mig-1"])
refresh_spec = pod_spec([container("refresh", SERVE_IMG, {"nvidia.com/mig-1g.10gb": 1})], restartPolicy="OnFailure")
controllers.append({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta("embedding-refresh", "team-research"),
                    "spec": {"schedule": "30 2 * * *", "jobTemplate": {"spec": {"template": {"spec": refresh_spec}}}}})
running_pod("notebook-alice", "team-research", None, pod_spec(
    [container("jupyter", "quay.io/jupyter/pytorch-notebook:cuda12-2025-10-20", securityContext={"privileged": True},
               volumeMounts=[{"name": "nvidia0", "mountPath": "/dev/nvidia0"}])],
    volumes=[{"name": "nvidia0", "hostPath": {"path": "/dev/nvidia0", "type": "CharDevice"}}]), "gpu-a100-1")
deployment("cuda-debugger", "team-research", 1,
           pod_spec([container("gdb", TRAIN_IMG, {"nvidia.com/gpu": 1})], nodeName="gpu-a100-1"), ["gpu-a100-1"])

# team-recsys (legacy): time-sliced ranking service; a reranker on the un-renamed time-sliced node (nvidia.com/gpu: 1
# is a quarter of a T4 there); a feature job that pins GPUs by env var
deployment("ranker", "team-recsys", 4,
           pod_spec([container("ranker", SERVE_IMG, {"nvidia.com/gpu.shared": 1})]), ["gpu-t4-1"])
deployment("reranker-lite", "team-recsys", 3,
           pod_spec([container("rerank", SERVE_IMG, {"nvidia.com/gpu": 1})]), ["gpu-t4-2"])
feat_spec = pod_spec([container("features", TRAIN_IMG, {"nvidia.com/gpu": 1},
                                env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"}])], restartPolicy="Never")
feat = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("feature-backfill", "team-recsys"),
        "spec": {"template": {"spec": feat_spec}}}
jobs.append(feat)
running_pod("feature-backfill-q8w2n", "team-recsys", feat, feat_spec, "gpu-a100-2")

# team-batch (legacy, ready): an embarrassingly parallel evaluation Job whose init container warms up 2 GPUs
eval_spec = pod_spec([container("eval", TRAIN_IMG, {"nvidia.com/gpu": 1})], restartPolicy="Never",
                     initContainers=[container("warmup", TRAIN_IMG, {"nvidia.com/gpu": 2})])
ev = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("eval-sweep", "team-batch"),
      "spec": {"parallelism": 2, "completions": 16, "template": {"spec": eval_spec}}}
jobs.append(ev)
for i in range(2):
    running_pod(f"eval-sweep-{i}-m3k8z", "team-batch", ev, eval_spec, "gpu-h100-1")
running_pod("eval-sweep-old-x1", "team-batch", ev, eval_spec, "gpu-h100-1", phase="Succeeded")

# team-vision (legacy): a batch Job selecting GPU family `ampere`, meant for the A100s and the L4 (which the L4
# node's older GFD labels `ampere`; current GFD says ada-lovelace, as on the L40S node)
family_spec = pod_spec([container("embed", TRAIN_IMG, {"nvidia.com/gpu": 1})], restartPolicy="Never",
                       nodeSelector={"nvidia.com/gpu.family": "ampere"})
fam = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("clip-embeddings", "team-vision"),
       "spec": {"parallelism": 2, "completions": 8, "template": {"spec": family_spec}}}
jobs.append(fam)
for i, n in enumerate(["gpu-a100-2", "gpu-a100-2"]):
    running_pod(f"clip-embeddings-{i}-z7q2m", "team-vision", fam, family_spec, n)

# team-nlp (shadow): an RL sweep scheduled by Volcano
rl_spec = pod_spec([container("actor", TRAIN_IMG, {"nvidia.com/gpu": 1})], restartPolicy="Never",
                   schedulerName="volcano")
rl_job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("rlhf-sweep", "team-nlp"),
          "spec": {"parallelism": 2, "completions": 2, "template": {"spec": rl_spec}}}
jobs.append(rl_job)
for i in range(2):
    running_pod(f"rlhf-sweep-{i}-p9x3d", "team-nlp", rl_job, rl_spec, "gpu-h100-2")

# team-rl (legacy): training jobs admitted by Kueue (LocalQueue rl-queue -> ClusterQueue gpu-research)
kq_labels = {"kueue.x-k8s.io/queue-name": "rl-queue"}
ppo_spec = pod_spec([container("ppo", TRAIN_IMG, {"nvidia.com/gpu": 2})], restartPolicy="Never")
ppo = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("ppo-atari", "team-rl", labels=kq_labels),
       "spec": {"parallelism": 1, "completions": 1, "suspend": False, "template": {"spec": ppo_spec}}}
jobs.append(ppo)
running_pod("ppo-atari-0-w8r4t", "team-rl", ppo, ppo_spec, "gpu-a100-1")

# ------------------------------------------------------------------------------------------------- agents


def daemonset(name: str, ns: str, labels: dict, spec: Obj, nodes_: list[str]) -> None:
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta(name, ns, labels=labels),
          "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": spec}},
          "status": {"desiredNumberScheduled": len(nodes_), "currentNumberScheduled": len(nodes_),
                     "numberMisscheduled": 0, "numberReady": len(nodes_)}}
    controllers.append(ds)
    for n in nodes_:
        running_pod(f"{name}-{n[-6:].replace('-', '')}", ns, ds, spec, n, labels)


DP_NODES = ["gpu-a100-1", "gpu-a100-2", "gpu-mig-1", "gpu-t4-1", "gpu-t4-2"]
BRIDGE_NODES = ["gpu-h100-1", "gpu-h100-2", "gpu-l4-1"]
daemonset("nvidia-device-plugin-daemonset", "gpu-operator", {"app": "nvidia-device-plugin-daemonset"},
          pod_spec([container("nvidia-device-plugin", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1")],
                   nodeSelector=DP)  , DP_NODES)
daemonset("gpu-feature-discovery", "gpu-operator", {"app": "gpu-feature-discovery"},
          pod_spec([container("gfd", "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
                              command=["gpu-feature-discovery"])]), DP_NODES + BRIDGE_NODES + ["gpu-l40s-1"])
daemonset("nvidia-dcgm-exporter", "gpu-operator", {"app": "nvidia-dcgm-exporter"},
          pod_spec([container("dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04")]),
          DP_NODES + BRIDGE_NODES + ["gpu-l40s-1"])
daemonset("dra-bridge-node", "dra-bridge", {"app.kubernetes.io/name": "dra-bridge", "app.kubernetes.io/component": "node"},
          pod_spec([container("node", "ghcr.io/dra-bridge/dra-bridge:0.1.0", args=["node"])], nodeSelector=BRIDGE),
          BRIDGE_NODES)
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


# ------------------------------------------------------------------------------------------------- custom resources

owner_policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": meta("cluster-policy"),
                "spec": {"operator": {"defaultRuntime": "containerd"}, "driver": {"enabled": True},
                         "toolkit": {"enabled": True},
                         "devicePlugin": {"enabled": True, "config": {"name": "device-plugin-config", "default": "default"}},
                         "gfd": {"enabled": True}, "dcgmExporter": {"enabled": True},
                         "mig": {"strategy": "single"}, "migManager": {"enabled": True}}}
CRDS = [
    owner_policy,
    {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": meta("gpu-research"),
     "spec": {"namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
              "flavors": [{"name": "a100", "resources": [{"name": "cpu", "nominalQuota": "256"},
                                                         {"name": "memory", "nominalQuota": "2Ti"},
                                                         {"name": "nvidia.com/gpu", "nominalQuota": "8"}]}]}]}},
    {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue", "metadata": meta("rl-queue", "team-rl"),
     "spec": {"clusterQueue": "gpu-research"}},
]


# The translated team-speech pods' template and claims (created last, so the UIDs above stay as they were): the
# webhook's template for one GPU, and the claim the claim controller generated from it for each pod, allocated a
# device of the bridge on gpu-h100-2 (gpu-2 and gpu-3, on its DRA side).
DRA.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": meta(ASR_TEMPLATE, "team-speech", labels={"app.kubernetes.io/managed-by": "dra-bridge",
                                                                  "dra-bridge.io/gpu-count": "1"}),
            "spec": {"metadata": {"labels": {"app.kubernetes.io/managed-by": "dra-bridge"}},
                     "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                         "deviceClassName": "gpu.dra-bridge.io", "allocationMode": "ExactCount", "count": 1}}]}}}})
for i, p in enumerate(p for p in pods if p["metadata"]["namespace"] == "team-speech"):
    claim_name = f"{p['metadata']['name']}-gpu-{'mzq4w'[i]}8k2v"
    p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    DRA.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": meta(claim_name, "team-speech", owner=p,
                                 annotations={"resource.kubernetes.io/pod-claim-name": "gpu"}),
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.dra-bridge.io", "allocationMode": "ExactCount", "count": 1}}]}},
                "status": {"allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": "gpu.dra-bridge.io", "pool": "gpu-h100-2", "device": f"gpu-{i + 2}"}]}},
                    "reservedFor": [{"resource": "pods", "name": p["metadata"]["name"],
                                     "uid": p["metadata"]["uid"]}]}})

# The split status each bridge node daemon writes on its Node (annotation dra-bridge.io/split-status, schema version 1
# in bridge/ledger/status.py): every GPU's side and holders as the daemon sees them, consistent with the pods above
# and the ResourceSlices (a GPU is in a slice only on the DRA side, and never held by a device-plugin pod there).
def legacy_holders(pod_name: str, ns: str, containers: list[tuple[str, str]]) -> list[str]:
    return [f"pod {ns}/{pod_name} container {c} ({kind})" for c, kind in containers]


def split_status(node_name: str, seed: str, requested: str, sides: list[str], holders: dict[int, list[str]]) -> str:
    devices = [{"name": f"gpu-{i}", "uuid": f"GPU-{seed}-{i:04d}-4000-8000-00000000{i:04d}", "side": side,
                "numa": 0 if i < 4 else 1, "holders": holders.get(i, [])} for i, side in enumerate(sides)]
    doc = {"version": 1, "node": node_name, "updated": TS, "requested": {"value": requested, "source": "label"},
           "state": "converged", "message": "", "wanted": sides.count("dra"),
           "counts": {side: sides.count(side) for side in ("legacy", "dra", "withdrawn")},
           "devices": devices, "pending": [], "refusals": []}
    return json.dumps(doc, separators=(",", ":"))


MAIN, INIT = "legacy container", "legacy init container"
asr_claims = [(c["metadata"]["name"], c["metadata"]["ownerReferences"][0]["name"]) for c in DRA
              if c["kind"] == "ResourceClaim"]
STATUSES = {
    "gpu-h100-1": split_status("gpu-h100-1", "a1b2c3d4", "0", ["legacy"] * 8, {
        0: legacy_holders("llm-server-0", "team-nlp", [("vllm", MAIN)]),
        1: legacy_holders("llm-server-0", "team-nlp", [("vllm", MAIN)]),
        2: legacy_holders("llm-server-1", "team-nlp", [("vllm", MAIN)]),
        3: legacy_holders("llm-server-1", "team-nlp", [("vllm", MAIN)]),
        4: legacy_holders("eval-sweep-0-m3k8z", "team-batch", [("warmup", INIT), ("eval", MAIN)]),
        5: legacy_holders("eval-sweep-0-m3k8z", "team-batch", [("warmup", INIT)]),
        6: legacy_holders("eval-sweep-1-m3k8z", "team-batch", [("warmup", INIT), ("eval", MAIN)]),
        7: legacy_holders("eval-sweep-1-m3k8z", "team-batch", [("warmup", INIT)])}),
    "gpu-h100-2": split_status("gpu-h100-2", "e5f6a7b8", "6", ["legacy"] * 2 + ["dra"] * 6, {
        0: legacy_holders("rlhf-sweep-0-p9x3d", "team-nlp", [("actor", MAIN)]),
        1: legacy_holders("rlhf-sweep-1-p9x3d", "team-nlp", [("actor", MAIN)]),
        **{2 + i: [f"claim team-speech/{claim} (pod team-speech/{pod}) (DRA claim prepared)"]
           for i, (claim, pod) in enumerate(asr_claims)}}),
    "gpu-l4-1": split_status("gpu-l4-1", "b1c2d3e4", "all", ["dra"] * 8, {}),
}
for n in NODES:
    if n["metadata"]["name"] in STATUSES:
        n["metadata"]["annotations"] = {"dra-bridge.io/split-status": STATUSES[n["metadata"]["name"]]}

# Leader election of another component: the report reads Leases to find `bridge controller`'s and ignores others.
LEASES = [{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta("kube-scheduler", "kube-system"),
           "spec": {"holderIdentity": "control-plane-1_5b8c2e3a-1f4d-4a7e-9c21-7d0b6e4f8a90",
                    "leaseDurationSeconds": 15, "acquireTime": "2026-11-02T08:00:00.000000Z",
                    "renewTime": "2026-11-02T09:00:00.000000Z", "leaseTransitions": 3}}]


def as_list(items: list[Obj]) -> Obj:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items}


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "nodes.yaml": NODES, "namespaces.yaml": NAMESPACES, "priorityclasses.yaml": PRIORITY,
        "resourcequotas.yaml": QUOTAS, "configmaps.yaml": CONFIGMAPS, "dra.yaml": DRA,
        "controllers.yaml": controllers + replicasets + jobs, "pods.yaml": pods, "leases.yaml": LEASES,
    }
    for name, items in files.items():
        (out / name).write_text(yaml.safe_dump(as_list(items), sort_keys=False, width=120))
    crds = yaml.safe_dump(as_list(CRDS), sort_keys=False, width=120).encode()
    (out / "crds.yaml.gz").write_bytes(gzip.compress(crds, mtime=0))  # mtime 0: byte-identical on every run
    (out / "version.json").write_text(json.dumps(
        {"serverVersion": {"major": "1", "minor": "36", "gitVersion": "v1.36.2", "platform": "linux/amd64"}},
        indent=2) + "\n")
    groups = ["v1", "apps/v1", "batch/v1", "scheduling.k8s.io/v1", "admissionregistration.k8s.io/v1",
              "resource.k8s.io/v1", "resource.k8s.io/v1beta1", "resource.k8s.io/v1beta2", "nvidia.com/v1",
              "kueue.x-k8s.io/v1beta1"]
    (out / "api-versions.txt").write_text("\n".join(sorted(groups)) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "examples" / "cluster-snapshot"))
