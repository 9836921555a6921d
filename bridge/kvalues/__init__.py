"""Kubernetes value types shared by the webhook, the report and the stand-ins: pure, no I/O.

* `quantity` — resource quantities ("8", "80Gi", "500m", "1e3") as exact Fractions
  (k8s.io/apimachinery/pkg/api/resource/quantity.go).
* `cel` — the DRA CEL environment: the `device` variable and the Kubernetes library functions DRA selectors use
  (quantity, semver, strings), compiled once and evaluated with the real scheduler's rule that a runtime error is an
  error, not "no match" (k8s.io/dynamic-resource-allocation/cel/compile.go).

One implementation of each, so the webhook, the report and the sandbox cannot disagree about what a value means.
"""
