{{/*
A ValidatingAdmissionPolicy + binding for Node writes by one of our service accounts: only the listed annotation
keys may change (added, changed or removed), never labels or spec; with ownNode, only on the node named in the
service account token (the node daemon). Params: root, name, user, component, keys, ownNode.
*/}}
{{- define "dra-bridge.nodeWritePolicy" -}}
{{- $keys := printf "[%s]" (include "dra-bridge.celStrings" .keys) -}}
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ .name }}
  labels:
    {{- include "dra-bridge.labels" (dict "root" .root "component" .component) | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [UPDATE]
        resources: [nodes]
  matchConditions:
    - name: {{ .component }}
      expression: request.userInfo.username == {{ .user | quote }}
  variables:
    {{- if .ownNode }}
    - name: userNodeName
      expression: >-
        has(request.userInfo.extra) && 'authentication.kubernetes.io/node-name' in request.userInfo.extra
        ? request.userInfo.extra['authentication.kubernetes.io/node-name'][0] : ''
    {{- end }}
    - name: newAnnotations
      expression: 'has(object.metadata.annotations) ? object.metadata.annotations : {}'
    - name: oldAnnotations
      expression: 'has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}'
    # The annotation keys this component writes.
    - name: ownKeys
      expression: {{ $keys | quote }}
  validations:
    {{- if .ownNode }}
    - expression: variables.userNodeName != "" && object.metadata.name == variables.userNodeName
      messageExpression: >-
        "the node daemon on node '" + variables.userNodeName + "' may change only its own Node, not '"
        + object.metadata.name + "'"
      reason: Forbidden
    {{- end }}
    - expression: >-
        variables.newAnnotations.all(k, k in variables.ownKeys
        || (k in variables.oldAnnotations && variables.oldAnnotations[k] == variables.newAnnotations[k]))
        && variables.oldAnnotations.all(k, k in variables.ownKeys || k in variables.newAnnotations)
      message: the {{ .component }} service account may change only the annotations {{ join ", " .keys }} on Nodes
      reason: Forbidden
    - expression: >-
        (has(object.metadata.labels) ? object.metadata.labels : {})
        == (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})
        && (has(object.spec) ? object.spec : {}) == (has(oldObject.spec) ? oldObject.spec : {})
      message: the {{ .component }} service account may not change a Node's labels or spec (taints, unschedulable, podCIDR)
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ .name }}
  labels:
    {{- include "dra-bridge.labels" (dict "root" .root "component" .component) | nindent 4 }}
spec:
  policyName: {{ .name }}
  validationActions: [Deny]
{{- end -}}

{{/* A list of strings as CEL string literals, comma-separated. */}}
{{- define "dra-bridge.celStrings" -}}
{{- $out := list -}}
{{- range . }}{{ $out = append $out (printf "'%s'" .) }}{{ end -}}
{{- join ", " $out -}}
{{- end -}}
