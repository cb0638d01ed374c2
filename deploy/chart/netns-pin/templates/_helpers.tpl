{{/*
The installer image: image.repository, tagged image.tag or else the
chart's appVersion (the release the chart is part of).
*/}}
{{- define "netns-pin.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
The helpers below print their fields each on a line of its own, indented
by their last argument, and begin with a newline, or print nothing: call
them with {{- include ... }} at the end of the line before.
*/}}

{{/*
A container's image and pull policy: (list <image> <pullPolicy> <indent>).
*/}}
{{- define "netns-pin.containerImage" -}}
{{- $n := index . 2 }}
{{- printf "image: %s" (index . 0) | nindent $n }}
{{- with index . 1 }}
{{- printf "imagePullPolicy: %s" . | nindent $n }}
{{- end }}
{{- end }}

{{/*
The scheduling fields of a pod spec from a component's values
(nodeSelector, affinity, tolerations) and the chart's imagePullSecrets:
(list $ <component values> <indent>).
*/}}
{{- define "netns-pin.scheduling" -}}
{{- $root := index . 0 }}
{{- $v := index . 1 }}
{{- $fields := dict }}
{{- with $root.Values.imagePullSecrets }}{{ $_ := set $fields "imagePullSecrets" . }}{{ end }}
{{- with $v.nodeSelector }}{{ $_ := set $fields "nodeSelector" . }}{{ end }}
{{- with $v.affinity }}{{ $_ := set $fields "affinity" . }}{{ end }}
{{- with $v.tolerations }}{{ $_ := set $fields "tolerations" . }}{{ end }}
{{- with $fields }}
{{- toYaml . | nindent (index $ 2) }}
{{- end }}
{{- end }}

{{/*
A pod template's annotations: (list <annotations> <indent>).
*/}}
{{- define "netns-pin.podAnnotations" -}}
{{- with index . 0 }}
{{- toYaml (dict "annotations" .) | nindent (index $ 1) }}
{{- end }}
{{- end }}

{{/*
A container's resources: (list <resources> <indent>).
*/}}
{{- define "netns-pin.resources" -}}
{{- with index . 0 }}
{{- toYaml (dict "resources" .) | nindent (index $ 1) }}
{{- end }}
{{- end }}

{{/*
The user's ServiceAccount name of a component in the release's
namespace, as the admission policies match it:
(list $ <ServiceAccount name>).
*/}}
{{- define "netns-pin.serviceAccountUser" -}}
system:serviceaccount:{{ (index . 0).Release.Namespace }}:{{ index . 1 }}
{{- end }}

{{/*
A network's netns-pin entry: type netns-pin and the network's netnsPin
values; pinDir from kubeletDir when the network sets none and kubeletDir
is not the default's (netns-pin's default pinDir is under
/var/lib/kubelet): (list $ <network>).
*/}}
{{- define "netns-pin.pinEntry" -}}
{{- $root := index . 0 }}
{{- $net := index . 1 }}
{{- $pin := deepCopy ($net.netnsPin | default dict) }}
{{- if and (not (hasKey $pin "pinDir")) (ne (clean $root.Values.kubeletDir) "/var/lib/kubelet") }}
{{- $_ := set $pin "pinDir" (printf "%s/plugins/netns-pin" (clean $root.Values.kubeletDir)) }}
{{- end }}
{{- $_ := set $pin "type" "netns-pin" }}
{{- toJson $pin }}
{{- end }}
