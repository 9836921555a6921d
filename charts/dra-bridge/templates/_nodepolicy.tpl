{{/*
A ValidatingAdmissionPolicy + binding for Node writes by one of our service accounts: the whole Node stays as it
was except the listed annotation keys (added, changed or removed); with ownNode, only on the node named in the
service account token (the node daemon). Params: root, name, user, component, keys, ownNode.

"The whole Node": CEL cannot iterate an object's fields (all() takes lists and maps), so every field an update can
change is compared, one validation each so the refusal names it: the annotations (but ours), labels, owner
references (a dangling one gets the Node garbage-collected with its pods), finalizers, generateName, spec and
status. The rest of metadata cannot change in an update (name, uid, creationTimestamp, deletionTimestamp: apimachinery
ValidateObjectMetaUpdate) or is the server's own (resourceVersion, generation, managedFields, which the field manager
rewrites on every write). Status: `resources: [nodes]` does not match the nodes/status subresource (a rule matches a
subresource only when it names it, apiserver pkg/admission/plugin/policy/matching), and on the main resource the Node
strategy's PrepareForUpdate puts the stored status back before validating admission runs (apiserver
pkg/registry/generic/registry/store.go: BeforeUpdate, then updateValidation), so the comparison holds for every
request this policy sees. A field is compared as `has(new) == has(old) && (!has(new) || new == old)`: no ternary
between an object type and a map literal, which the real type checker may refuse.
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
    {{- range $field, $what := dict "metadata.labels" "labels" "metadata.ownerReferences" "owner references" "metadata.finalizers" "finalizers" "metadata.generateName" "generateName" "spec" "spec (taints, unschedulable, podCIDR)" "status" "status" }}
    - expression: >-
        has(object.{{ $field }}) == has(oldObject.{{ $field }})
        && (!has(object.{{ $field }}) || object.{{ $field }} == oldObject.{{ $field }})
      message: the {{ $.component }} service account may not change a Node's {{ $what }}
      reason: Forbidden
    {{- end }}
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
