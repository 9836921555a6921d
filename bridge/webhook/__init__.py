"""The admission webhook: translates `nvidia.com/gpu` requests of pods in DRA namespaces into DRA requests.

Pure core: `policy` (who), `cel` (GFD labels -> CEL), `translate` (pod -> JSONPatch + templates), `review`
(AdmissionReview in -> response out). Shell: `effects` (templates, Events, namespace cache through `bridge.kube`),
`server` (HTTPS), `app` (composition root for `bridge webhook`).
"""
