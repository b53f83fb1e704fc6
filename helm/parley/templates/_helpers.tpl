{{/*
Names, labels and the pieces every component's templates share.

Components: "coordinator", "agent-worker", "judge-worker" and, with serve.enabled, "serve"
(the web page). A component's values live under .Values.coordinator / .Values.agentWorker /
.Values.judgeWorker / .Values.serve ("parley.componentValues").
*/}}

{{- define "parley.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* <release>-<chart>, or the release name alone when it already contains the chart name. */}}
{{- define "parley.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "parley.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Name of a component's resources: (dict "ctx" $ "component" "agent-worker"). */}}
{{- define "parley.componentName" -}}
{{- printf "%s-%s" (include "parley.fullname" .ctx | trunc (int (sub 62 (len .component))) | trimSuffix "-") .component }}
{{- end }}

{{/* Labels of every resource of the release. */}}
{{- define "parley.labels" -}}
helm.sh/chart: {{ include "parley.chart" . }}
app.kubernetes.io/name: {{ include "parley.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: parley
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component: (dict "ctx" $ "component" "coordinator"). */}}
{{- define "parley.selectorLabels" -}}
app.kubernetes.io/name: {{ include "parley.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels of one component's resources: the release's plus its component. */}}
{{- define "parley.componentLabels" -}}
{{ include "parley.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The values of a component. */}}
{{- define "parley.componentValues" -}}
{{- $key := get (dict "coordinator" "coordinator" "agent-worker" "agentWorker" "judge-worker" "judgeWorker" "serve" "serve") .component }}
{{- toYaml (get .ctx.Values $key) }}
{{- end }}

{{/* The JetStream names the services create (crates/cluster/src/streams.rs): fixed, not values. */}}
{{- define "parley.tasksStream" -}}PARLEY_TASKS{{- end }}
{{- define "parley.consumer" -}}
{{- get (dict "agent-worker" "agent-workers" "judge-worker" "judge-workers") . }}
{{- end }}

{{- define "parley.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "parley.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The components that connect to NATS: the three services, and serve when enabled. */}}
{{- define "parley.natsComponents" -}}
{{- $c := list "coordinator" "agent-worker" "judge-worker" }}
{{- if .Values.serve.enabled }}{{ $c = append $c "serve" }}{{ end }}
{{- join " " $c }}
{{- end }}

{{/* The values key of a component's NATS user and credential (nats.users.<key>, secrets.nats.<key>). */}}
{{- define "parley.componentKey" -}}
{{- get (dict "coordinator" "coordinator" "agent-worker" "agentWorker" "judge-worker" "judgeWorker" "serve" "serve") . }}
{{- end }}

{{- define "parley.secretName" -}}
{{- default (include "parley.fullname" .) .Values.secrets.existingSecret }}
{{- end }}

{{- define "parley.configMapName" -}}
{{- include "parley.fullname" . }}-config
{{- end }}

{{/*
Image of a component: (dict "ctx" $ "component" "agent-worker"). Local-model mode gives
the workers the tag with the model baked in (<tag><localModel.tagSuffix>).
*/}}
{{- define "parley.image" -}}
{{- $v := include "parley.componentValues" . | fromYaml }}
{{- $g := .ctx.Values.image }}
{{- $tag := $v.image.tag | default $g.tag | default .ctx.Chart.AppVersion }}
{{- if and .ctx.Values.localModel.enabled (has .component (list "agent-worker" "judge-worker")) }}
{{- $tag = printf "%s%s" $tag .ctx.Values.localModel.tagSuffix }}
{{- end }}
{{- $repo := $v.image.repository }}
{{- with $g.registry }}
{{- $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}
{{- end }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}

{{/*
Whether KEDA scales a worker kind: (dict "ctx" $ "component" "agent-worker") → "true" / "".
The kind's keda.enabled wins when set; otherwise keda.enabled.
*/}}
{{- define "parley.kedaEnabled" -}}
{{- if ne .component "coordinator" }}
{{- $v := include "parley.componentValues" . | fromYaml }}
{{- $own := dig "keda" "enabled" nil $v }}
{{- if kindIs "bool" $own }}
{{- if $own }}true{{ end }}
{{- else if .ctx.Values.keda.enabled }}true
{{- end }}
{{- end }}
{{- end }}

{{/* Whether the CPU HPA scales a worker kind (only when KEDA does not). */}}
{{- define "parley.hpaEnabled" -}}
{{- if ne .component "coordinator" }}
{{- $v := include "parley.componentValues" . | fromYaml }}
{{- if and (not (include "parley.kedaEnabled" .)) $v.hpa.enabled }}true{{ end }}
{{- end }}
{{- end }}

{{/* A worker kind's concurrency (local-model mode sets its own). */}}
{{- define "parley.concurrency" -}}
{{- $v := include "parley.componentValues" . | fromYaml }}
{{- if .ctx.Values.localModel.enabled }}{{ .ctx.Values.localModel.concurrency }}{{ else }}{{ $v.concurrency }}{{ end }}
{{- end }}

{{/*
Grace period of a component's pods: drain_secs + gracePeriodMarginSeconds (at least 1, by the
schema). drain_secs is the service's own exit deadline after SIGTERM: it drains what it can
(a worker finishes or hands back its tasks, the coordinator releases its leases) and exits
by then even when NATS or Redis is unreachable, logging what it gave up on (exit status 5).
Nothing is lost by giving up: a task not handed back is redelivered by JetStream after its
ack wait, and a lease not released expires after lease_ttl_ms, so another replica resumes
the debate from its checkpoint. The margin covers process start-up of the signal and the
trace flush, so SIGKILL never cuts a drain short.
*/}}
{{- define "parley.gracePeriod" -}}
{{- $v := include "parley.componentValues" . | fromYaml }}
{{- add $v.drainSecs $v.gracePeriodMarginSeconds }}
{{- end }}

{{/*
The TOML settings file of a component (crates/cluster/src/settings.rs). Everything here is
safe to keep in a ConfigMap: credentials come from the Secret as environment variables or
mounted files. `settings` adds keys.
*/}}
{{- define "parley.settingsToml" -}}
{{- $v := include "parley.componentValues" . | fromYaml }}
{{- $ctx := .ctx -}}
# {{ .component }} settings; PARLEY_* variables override them.
nats_url = {{ $ctx.Values.nats.url | toJson }}
redis_url = {{ $ctx.Values.redis.url | toJson }}
stream_replicas = {{ int $ctx.Values.nats.streamReplicas }}
redis_min_replicas = {{ int $ctx.Values.redis.minReplicas }}
metrics_addr = {{ printf "0.0.0.0:%d" (int $ctx.Values.metrics.port) | toJson }}
drain_secs = {{ int $v.drainSecs }}
{{- if eq .component "coordinator" }}
lease_ttl_ms = {{ int $v.leaseTtlMs }}
# The operator's providers section: allowedModels are refused at submission.
config = "debate-config.json"
{{- else }}
concurrency = {{ include "parley.concurrency" . }}
ack_wait_secs = {{ int $v.ackWaitSecs }}
config = "debate-config.json"
{{- end }}
{{- range $k, $val := $v.settings }}
{{ $k }} = {{ $val | toJson }}
{{- end }}
{{- end }}

{{/*
PARLEY_NATS_URL of a component with nats.auth=password: its own user, and the password
from $(NATS_PASSWORD), in the first server URL (the client takes the credentials from it).
*/}}
{{- define "parley.natsUrlWithUser" -}}
{{- $ctx := .ctx }}
{{- $user := get $ctx.Values.nats.users (include "parley.componentKey" .component) }}
{{- $urls := splitList "," $ctx.Values.nats.url }}
{{- $first := trim (first $urls) }}
{{- $withUser := "" }}
{{- if contains "://" $first }}
{{- $parts := splitn "://" 2 $first }}
{{- $withUser = printf "%s://%s:$(NATS_PASSWORD)@%s" $parts._0 $user $parts._1 }}
{{- else }}
{{- $withUser = printf "%s:$(NATS_PASSWORD)@%s" $user $first }}
{{- end }}
{{- join "," (prepend (rest $urls) $withUser) }}
{{- end }}

{{/*
PARLEY_REDIS_URL with redis.passwordSecret: `:$(REDIS_PASSWORD)@` after the scheme.
*/}}
{{- define "parley.redisUrlWithPassword" -}}
{{- $parts := splitn "://" 2 .Values.redis.url }}
{{- printf "%s://:$(REDIS_PASSWORD)@%s" $parts._0 $parts._1 }}
{{- end }}

{{/* Checks that fail the render with a message naming the value. */}}
{{- define "parley.validate" -}}
{{- $ctx := . }}
{{- $natsComponents := splitList " " (include "parley.natsComponents" .) }}
{{- if ne .Values.nats.auth "none" }}
{{- if not .Values.secrets.existingSecret }}
{{- $seen := dict }}
{{- range $c := $natsComponents }}
{{- $k := include "parley.componentKey" $c }}
{{- $cred := get $ctx.Values.secrets.nats $k }}
{{- if not $cred }}
{{- fail (printf "nats.auth=%s needs secrets.nats.%s (each component its own NATS credential) or secrets.existingSecret; nats.auth=none only for a NATS without authentication" $ctx.Values.nats.auth $k) }}
{{- end }}
{{- if hasKey $seen $cred }}
{{- fail (printf "secrets.nats: two components share one NATS credential (%s and %s); give each its own (deploy/nats/parley.conf has a user per component)" (get $seen $cred) $k) }}
{{- end }}
{{- $_ := set $seen $cred $k }}
{{- end }}
{{- end }}
{{- if eq .Values.nats.auth "password" }}
{{- $users := dict }}
{{- range $c := $natsComponents }}
{{- $k := include "parley.componentKey" $c }}
{{- $u := get $ctx.Values.nats.users $k }}
{{- if hasKey $users $u }}
{{- fail (printf "nats.users: two components share one NATS user (%s and %s: %s); give each its own" (get $users $u) $k $u) }}
{{- end }}
{{- $_ := set $users $u $k }}
{{- end }}
{{- end }}
{{- end }}
{{- if .Values.serve.enabled }}
{{- if and (not .Values.secrets.existingSecret) (not .Values.secrets.serveToken) }}
{{- fail "serve.enabled needs secrets.serveToken (the page's bearer token, at least 16 characters) or secrets.existingSecret with a serve-token key" }}
{{- end }}
{{- if and .Values.secrets.serveToken (lt (len .Values.secrets.serveToken) 16) }}
{{- fail "secrets.serveToken is shorter than 16 characters (parley serve refuses it)" }}
{{- end }}
{{- end }}
{{- if and .Values.redis.urlFromSecret .Values.redis.passwordSecret.name }}
{{- fail "redis.urlFromSecret and redis.passwordSecret.name both set: keep one (the URL in the Secret, or the password)" }}
{{- end }}
{{- if and .Values.redis.passwordSecret.name (contains "@" .Values.redis.url) }}
{{- fail "redis.url carries credentials and redis.passwordSecret.name is set: keep the password in the Secret only" }}
{{- end }}
{{- if and .Values.redis.urlFromSecret (not .Values.secrets.existingSecret) (not .Values.secrets.redisUrl) }}
{{- fail "redis.urlFromSecret needs secrets.redisUrl or secrets.existingSecret" }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled .Values.metrics.podMonitor.enabled }}
{{- fail "metrics.serviceMonitor.enabled and metrics.podMonitor.enabled both scrape every pod: enable one" }}
{{- end }}
{{- range $c := list "agent-worker" "judge-worker" }}
{{- $args := dict "ctx" $ctx "component" $c }}
{{- if include "parley.kedaEnabled" $args }}
{{- if not ($ctx.Capabilities.APIVersions.Has "keda.sh/v1alpha1/ScaledObject") }}
{{- fail (printf "KEDA is enabled for %s but the cluster has no keda.sh/v1alpha1 ScaledObject: install KEDA first (or pass --api-versions keda.sh/v1alpha1/ScaledObject to helm template)" $c) }}
{{- end }}
{{- $k := include "parley.kedaSettings" $args | fromYaml }}
{{- if gt (int $k.minReplicaCount) (int $k.maxReplicaCount) }}
{{- fail (printf "%s: keda minReplicaCount (%d) is above maxReplicaCount (%d)" $c (int $k.minReplicaCount) (int $k.maxReplicaCount)) }}
{{- end }}
{{- end }}
{{- $v := include "parley.componentValues" $args | fromYaml }}
{{- if gt (int $v.hpa.minReplicas) (int $v.hpa.maxReplicas) }}
{{- fail (printf "%s: hpa.minReplicas (%d) is above hpa.maxReplicas (%d)" $c (int $v.hpa.minReplicas) (int $v.hpa.maxReplicas)) }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor")) }}
{{- fail "metrics.serviceMonitor.enabled but the cluster has no monitoring.coreos.com/v1 ServiceMonitor: install prometheus-operator's CRDs first (or pass --api-versions monitoring.coreos.com/v1/ServiceMonitor)" }}
{{- end }}
{{- if and .Values.metrics.podMonitor.enabled (not (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1/PodMonitor")) }}
{{- fail "metrics.podMonitor.enabled but the cluster has no monitoring.coreos.com/v1 PodMonitor: install prometheus-operator's CRDs first (or pass --api-versions monitoring.coreos.com/v1/PodMonitor)" }}
{{- end }}
{{- end }}

{{/* The KEDA settings of a worker kind: `keda` overlaid with the kind's `keda`. */}}
{{- define "parley.kedaSettings" -}}
{{- $v := include "parley.componentValues" . | fromYaml }}
{{- $k := mergeOverwrite (deepCopy (omit .ctx.Values.keda "enabled")) (omit (default dict $v.keda) "enabled") }}
{{- if not (hasKey $k "lagThreshold") }}
{{- $_ := set $k "lagThreshold" (include "parley.concurrency" . | int) }}
{{- end }}
{{- if not (hasKey $k "activationLagThreshold") }}
{{- $_ := set $k "activationLagThreshold" 0 }}
{{- end }}
{{- toYaml $k }}
{{- end }}

{{/* Selects the three components' Services / pods (not the `helm test` pod). */}}
{{- define "parley.monitorSelector" -}}
matchLabels:
  app.kubernetes.io/name: {{ include "parley.name" . }}
  app.kubernetes.io/instance: {{ .Release.Name }}
matchExpressions:
  - key: app.kubernetes.io/component
    operator: In
    values: [coordinator, agent-worker, judge-worker]
{{- end }}
