"""Kubernetes value types shared by the webhook, the report and the stand-ins: pure, no I/O.

* `quantity` — resource quantities ("8", "80Gi", "500m", "1e3") as exact Fractions
  (k8s.io/apimachinery/pkg/api/resource/quantity.go).
* `cel` — the DRA CEL environment: the `device` variable and the Kubernetes library functions DRA selectors use
  (quantity, semver, strings), compiled once and evaluated with the real scheduler's rule that a runtime error is an
  error, not "no match" (k8s.io/dynamic-resource-allocation/cel/compile.go).

* `podgpu` — how many devices of an extended resource a pod holds (the scheduler's and the device manager's
  arithmetic with init containers and sidecars), and the DRA claim-sharing plan that keeps that number.
* `gfd` — GPU Feature Discovery labels: the CEL that selects exactly the devices a label selected, the GFD family
  rule per release, and the labels saying `nvidia.com/gpu` is not a whole GPU (MIG single, time-slicing, MPS).

One implementation of each, so the webhook, the report and the sandbox cannot disagree about what a value means.
"""
