{{/* The driver's name (namespace of the kustomize install, ServiceAccount, roles, DaemonSet, container). */}}
{{- define "dra.name" -}}
{{- if not (hasKey .Values.kinds .Values.driver) -}}
{{- fail (printf "driver: %q is not one of %s" .Values.driver (keys .Values.kinds | sortAlpha | join ", ")) -}}
{{- end -}}
{{- printf "intel-%s-dra-driver" .Values.driver -}}
{{- end -}}

{{/* The kind's entry of .Values.kinds. */}}
{{- define "dra.kind" -}}
{{- toYaml (get .Values.kinds .Values.driver) -}}
{{- end -}}
