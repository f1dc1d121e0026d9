{{/* The labels of every object: the name `manifests` gives, and Helm's own. */}}
{{- define "route-controller.labels" -}}
app.kubernetes.io/name: route-controller
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The settings file of the provider, if it reads one: "secret key". */}}
{{- define "route-controller.cloudConfigFile" -}}
{{- $files := dict "azure" "azure-cloud-config azure.json" "gce" "gce-cloud-config gce.conf" "openstack" "openstack-cloud-config cloud.conf" "alibaba" "alibaba-cloud-config cloud-config.conf" "exec" "exec-cloud-config plugin.conf" -}}
{{- get $files .Values.cloudProvider -}}
{{- end }}

{{- define "route-controller.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end }}

{{/* Refuses what `manifests` refuses. */}}
{{- define "route-controller.validate" -}}
{{- $providers := list "hcloud" "aws" "azure" "gce" "openstack" "alibaba" "exec" "fake" -}}
{{- if not (has .Values.cloudProvider $providers) -}}
{{- fail (printf "cloudProvider: %q is not a provider; use one of %s" .Values.cloudProvider (join ", " $providers)) -}}
{{- end -}}
{{- if not .Values.clusterCIDR -}}
{{- fail "clusterCIDR is required: the pod network, the CCM's --cluster-cidr (e.g. --set clusterCIDR=10.244.0.0/16)" -}}
{{- end -}}
{{- /* As `manifests`: capitals or angle brackets (REGISTRY/..., <registry>/...), or a
host of the domains reserved for examples. */ -}}
{{- range $image := list .Values.image.repository .Values.exec.pluginImage -}}
{{- if regexMatch "[A-Z<>]|^([^/]*\\.)?example(\\.(com|org|net))?(:[0-9]+)?/" (regexReplaceAll "(@.*|:[^:/]*)$" $image "") -}}
{{- fail (printf "image: %q is a placeholder; build the image (README, \"In a cluster\"), push it to your registry and give its name" $image) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.exec.pluginImage (ne .Values.cloudProvider "exec") -}}
{{- fail "exec.pluginImage: only cloudProvider=exec runs a plugin" -}}
{{- end -}}
{{- end }}

{{/* Every container's restrictions: non-root, no capabilities, a read-only root. */}}
{{- define "route-controller.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  capabilities:
    drop: ["ALL"]
  seccompProfile:
    type: RuntimeDefault
{{- end }}
