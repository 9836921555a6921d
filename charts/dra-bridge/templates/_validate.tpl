{{/*
Fail-fast checks of combinations values.schema.json cannot express. Each message names the value to change and why.
Run on every install, upgrade, lint and template through templates/validate.yaml (which renders nothing).
*/}}
{{- define "dra-bridge.validate" -}}
{{- $v := .Values -}}
{{- if $v.node.enabled -}}
{{- $ru := $v.node.updateStrategy.rollingUpdate | default dict -}}
{{- $maxSurge := ternary $ru.maxSurge 0 (hasKey $ru "maxSurge") -}}
{{- $maxUnavailable := ternary $ru.maxUnavailable 1 (hasKey $ru "maxUnavailable") -}}
{{- $noSurge := has (toString $maxSurge) (list "0" "0%") -}}
{{- $noUnavailable := has (toString $maxUnavailable) (list "0" "0%") -}}
{{- if and (eq $v.node.updateStrategy.type "RollingUpdate") $noUnavailable $noSurge -}}
{{- fail "node.updateStrategy.rollingUpdate has maxUnavailable 0 and maxSurge 0: the DaemonSet could never roll; set maxSurge to 1 (the default: the new pod waits in standby beside the old one) or maxUnavailable to 1" -}}
{{- end -}}
{{- end -}}
{{- if $v.webhook.enabled -}}
{{- $tls := $v.webhook.tls -}}
{{- if eq $tls.mode "secret" -}}
{{- if not $tls.secretName -}}
{{- fail "webhook.tls.mode is secret: set webhook.tls.secretName to an existing kubernetes.io/tls Secret in the release namespace (keys tls.crt, tls.key)" -}}
{{- end -}}
{{- if not $tls.caBundle -}}
{{- fail "webhook.tls.mode is secret: set webhook.tls.caBundle to the base64-encoded PEM of the CA that signed the Secret's certificate (the API server verifies the webhook with it)" -}}
{{- end -}}
{{- else if or $tls.secretName $tls.caBundle -}}
{{- fail (printf "webhook.tls.secretName/caBundle are set but webhook.tls.mode is %s: set mode to secret to use them, or remove them" $tls.mode) -}}
{{- end -}}
{{- if and (eq (include "dra-bridge.tlsMode" .) "certManager") $tls.certManager.issuerRef (not $tls.certManager.issuerRef.name) -}}
{{- fail "webhook.tls.certManager.issuerRef needs a name (and kind Issuer or ClusterIssuer); leave issuerRef empty for a self-signed Issuer created by the chart" -}}
{{- end -}}
{{- if eq $v.webhook.failurePolicy "Fail" -}}
{{- if or (lt (int $v.webhook.replicas) 2) (not $v.webhook.podDisruptionBudget.enabled) -}}
{{- fail (printf "webhook.failurePolicy is Fail with %d replica(s) and the PodDisruptionBudget %s: any webhook outage would then block creating GPU pods in shadow/dra namespaces. Use webhook.replicas >= 2 and webhook.podDisruptionBudget.enabled=true, or failurePolicy Ignore" (int $v.webhook.replicas) (ternary "enabled" "disabled" $v.webhook.podDisruptionBudget.enabled)) -}}
{{- end -}}
{{- end -}}
{{- if and $v.webhook.podDisruptionBudget.enabled (ge (int $v.webhook.podDisruptionBudget.minAvailable) (int $v.webhook.replicas)) -}}
{{- fail (printf "webhook.podDisruptionBudget.minAvailable (%d) must be below webhook.replicas (%d), or no node running a webhook replica could ever be drained" (int $v.webhook.podDisruptionBudget.minAvailable) (int $v.webhook.replicas)) -}}
{{- end -}}
{{- if and $v.webhook.clientAuth.names (not $v.webhook.clientAuth.caConfigMap) -}}
{{- fail "webhook.clientAuth.names needs webhook.clientAuth.caConfigMap: the names are checked on client certificates signed by that CA (the ConfigMap in the release namespace holding the CA of the API server's client certificate)" -}}
{{- end -}}
{{- $np := $v.webhook.networkPolicy -}}
{{- if and $np.enabled (not $np.apiServerCIDRs) (not $np.additionalFrom) -}}
{{- fail "webhook.networkPolicy.enabled needs webhook.networkPolicy.apiServerCIDRs (each API server's address as the pods see it, e.g. 10.0.0.10/32): an ingress rule without sources would admit every client" -}}
{{- end -}}
{{- if and (eq $v.webhook.target "extended") (semverCompare "<1.36.0-0" .Capabilities.KubeVersion.Version) -}}
{{- fail (printf "webhook.target is extended, which needs Kubernetes 1.36+ (DRAExtendedResource) on the API server and every kubelet; this cluster is %s: use auto or claims" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- end -}}
{{- if and $v.controller.enabled (not $v.node.enabled) -}}
{{- fail "controller.enabled needs node.enabled: the controller moves GPUs by setting splits that the node daemons carry out and report" -}}
{{- end -}}
{{- if and (ne $v.resourceApiVersion "auto") (ne $v.resourceApiVersion "v1") (ne $v.resourceApiVersion "v1beta1") -}}
{{- fail (printf "resourceApiVersion is %q: use auto, v1 (Kubernetes 1.34+) or v1beta1 (1.32-1.33)" $v.resourceApiVersion) -}}
{{- end -}}
{{- end -}}
