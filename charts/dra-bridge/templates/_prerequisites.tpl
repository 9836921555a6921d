{{/*
What the cluster must serve for the values given, checked at render time so that an install on a cluster without it
fails with one sentence naming the value to set, before anything is created (instead of Helm's "no matches for
kind ..." halfway through). Helm fills .Capabilities from the cluster's discovery on install and upgrade; `helm
template` takes --kube-version and --api-versions. The Kubernetes version floor is Chart.yaml's kubeVersion, which
Helm itself enforces.

APIs that only a cluster's CRDs add (cert-manager, the Prometheus Operator) are never in an offline render's
Capabilities, so those checks run only against a cluster ("dra-bridge.live"); `helm lint` of a values file that
names them stays clean.
*/}}
{{- define "dra-bridge.prerequisites" -}}
{{- $v := .Values -}}
{{- $caps := .Capabilities.APIVersions -}}
{{- $live := include "dra-bridge.live" . -}}
{{- $served := list -}}
{{- range $version := list "v1" "v1beta2" "v1beta1" -}}
{{- if $caps.Has (printf "resource.k8s.io/%s" $version) -}}{{- $served = append $served $version -}}{{- end -}}
{{- end -}}
{{- $wantsDRA := or $v.deviceClass.create (and $v.node.enabled (ne $v.node.dra "off")) $v.controller.enabled -}}
{{- if and $wantsDRA (not $served) -}}
{{- fail (printf "This cluster (Kubernetes %s) serves no resource.k8s.io version, so DRA is off (on 1.32-1.33 it needs the DynamicResourceAllocation feature gate and --runtime-config=resource.k8s.io/v1beta1=true): turn it on, or set deviceClass.create=false, node.dra=off and controller.enabled=false to run only the device-plugin half" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if and $v.deviceClass.create $served (ne $v.resourceApiVersion "auto") (not ($caps.Has (printf "resource.k8s.io/%s/DeviceClass" $v.resourceApiVersion))) -}}
{{- fail (printf "resourceApiVersion is %s, but this cluster serves DeviceClass at resource.k8s.io %s only: set resourceApiVersion to auto" $v.resourceApiVersion (join ", " $served)) -}}
{{- end -}}
{{- if and $v.nodeRestriction.enabled (not ($caps.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy")) -}}
{{- fail "nodeRestriction.enabled needs ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, on by default since Kubernetes 1.30), which this cluster does not serve: turn it back on in the API server's --runtime-config, or set nodeRestriction.enabled=false (nothing then keeps a node daemon to its own node's ResourceSlices)" -}}
{{- end -}}
{{- $certManager := $caps.Has "cert-manager.io/v1" -}}
{{- if and $live $v.webhook.enabled (not $certManager) -}}
{{- $tls := $v.webhook.tls -}}
{{- if eq $tls.mode "certManager" -}}
{{- fail "webhook.tls.mode is certManager, but this cluster does not serve cert-manager.io/v1: install cert-manager first, or set webhook.tls.mode to auto or selfSigned (a certificate the chart generates at install)" -}}
{{- end -}}
{{- if and (eq $tls.mode "auto") $tls.certManager.issuerRef -}}
{{- fail "webhook.tls.certManager.issuerRef names a cert-manager issuer, but this cluster does not serve cert-manager.io/v1 (webhook.tls.mode auto would generate a self-signed certificate instead): install cert-manager first, or remove webhook.tls.certManager.issuerRef" -}}
{{- end -}}
{{- end -}}
{{- if and $live $v.metrics.serviceMonitor.enabled (not ($caps.Has "monitoring.coreos.com/v1")) -}}
{{- fail "metrics.serviceMonitor.enabled needs monitoring.coreos.com/v1 (the Prometheus Operator's CRDs), which this cluster does not serve: install them first, or set metrics.serviceMonitor.enabled=false" -}}
{{- end -}}
{{- end -}}
