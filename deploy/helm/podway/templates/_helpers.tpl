{{- define "podway.labels" -}}
app.kubernetes.io/name: podway
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* podAnnotations on a pod template (nindent 8): a changed value rolls every workload. */}}
{{- define "podway.podAnnotations" -}}
{{- with .Values.podAnnotations }}
annotations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "podway.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/* The prefixes a BGP engine host announces: reachability.bgp.announce, else every pool
     address entry that is a CIDR. */}}
{{- define "podway.announce" -}}
{{- $out := list -}}
{{- if .Values.reachability.bgp.announce -}}
{{- $out = .Values.reachability.bgp.announce -}}
{{- else -}}
{{- range .Values.vipPools -}}
{{- range .addresses -}}
{{- if contains "/" . -}}{{- $out = append $out . -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/* "group: kind" lines for the controller's --config engineGroups: each engine group that serves
only its objects (its engines pass --engine-group) and names its engine kind. */}}
{{- define "podway.engineKinds" -}}
{{- range .Values.engineGroups }}
{{- if and .onlyItsObjects .engine }}
{{ .name | quote }}: {{ .engine }}
{{- end }}
{{- end }}
{{- end }}

{{/* A label selector (k=v,k2=v2) from a nodeSelector map: the L2 speaker's group. */}}
{{- define "podway.selector" -}}
{{- $out := list -}}
{{- range $k, $v := . -}}{{- $out = append $out (printf "%s=%s" $k $v) -}}{{- end -}}
{{- join "," $out -}}
{{- end -}}
