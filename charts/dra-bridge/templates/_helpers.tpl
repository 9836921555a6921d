{{/* Names, labels and the few derived values every template shares. */}}

{{- define "dra-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "dra-bridge.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* <fullname>-<component>, within the 63 characters of a DNS label (Service names are DNS-1035 labels). */}}
{{- define "dra-bridge.component" -}}
{{- printf "%s-%s" (include "dra-bridge.fullname" .root | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component -}}
{{- end -}}

{{- define "dra-bridge.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "dra-bridge.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "dra-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dra-bridge.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* repository:tag, or repository:tag@digest when image.digest is set (the container runtime then checks it). */}}
{{- define "dra-bridge.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- with .Values.image.digest -}}@{{ . }}{{- end -}}
{{- end -}}

{{/* The webhook's TLS mode with `auto` resolved: certManager where the cluster serves cert-manager.io/v1 (on install
and upgrade Helm reads that from discovery; `helm template` takes --api-versions cert-manager.io/v1), else
selfSigned. */}}
{{- define "dra-bridge.tlsMode" -}}
{{- $mode := .Values.webhook.tls.mode -}}
{{- if eq $mode "auto" -}}
{{- ternary "certManager" "selfSigned" (.Capabilities.APIVersions.Has "cert-manager.io/v1") -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{/* "true" when rendering against a cluster (install, upgrade, --dry-run=server): `lookup` reads from the cluster
there and returns nothing in `helm template` and `helm lint`, whose Capabilities list only built-in APIs. Checks for
APIs that only a cluster's CRDs add (cert-manager, the Prometheus Operator) run only then, so linting a values file
that names them needs no cluster. */}}
{{- define "dra-bridge.live" -}}
{{- if lookup "v1" "Namespace" "" "kube-system" -}}true{{- end -}}
{{- end -}}

{{/* The service account user name the API server authenticates a component's pods as. */}}
{{- define "dra-bridge.serviceAccountUser" -}}
{{- printf "system:serviceaccount:%s:%s" .root.Release.Namespace (include "dra-bridge.component" .) -}}
{{- end -}}

{{/* resource.k8s.io version for the DeviceClass: v1 where served (1.34+), else v1beta1 (1.32-1.33). */}}
{{- define "dra-bridge.resourceApiVersion" -}}
{{- $want := .Values.resourceApiVersion -}}
{{- if eq $want "auto" -}}
{{- if .Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceClass" -}}v1
{{- else if .Capabilities.APIVersions.Has "resource.k8s.io/v1beta1/DeviceClass" -}}v1beta1
{{- else if semverCompare ">=1.34.0-0" .Capabilities.KubeVersion.Version -}}v1
{{- else -}}v1beta1
{{- end -}}
{{- else -}}{{ $want }}
{{- end -}}
{{- end -}}

{{/* The webhook Service's DNS names, for its certificate. */}}
{{- define "dra-bridge.webhookDNSNames" -}}
{{- $svc := include "dra-bridge.component" (dict "root" . "component" "webhook") -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{- define "dra-bridge.webhookTLSSecret" -}}
{{- if eq .Values.webhook.tls.mode "secret" -}}
{{- .Values.webhook.tls.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "dra-bridge.component" (dict "root" . "component" "webhook")) -}}
{{- end -}}
{{- end -}}

{{/* --log-format / --log-level, the same for every component. */}}
{{- define "dra-bridge.logArgs" -}}
- --log-format={{ .Values.logFormat }}
- --log-level={{ .Values.logLevel }}
{{- end -}}
