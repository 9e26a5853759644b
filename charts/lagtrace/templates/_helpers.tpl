{{/* Names: RELEASE-lagtrace unless overridden, cut to 63 characters (DNS labels). */}}
{{- define "lagtrace.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lagtrace.fullname" -}}
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

{{/*
Selector labels: only labels that never change for the life of a release. A
Deployment's selector is immutable, so a version or chart label here would make every
upgrade fail. Call with (dict "ctx" $ "component" "api").
*/}}
{{- define "lagtrace.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lagtrace.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Every resource's labels: the selector labels plus the ones that change. */}}
{{- define "lagtrace.labels" -}}
{{ include "lagtrace.selectorLabels" . }}
app.kubernetes.io/part-of: lagtrace
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "lagtrace.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "lagtrace.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lagtrace.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "lagtrace.secretName" -}}
{{- default (include "lagtrace.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/*
The chart generates no secret: a value made at render time (randAlphaNum, kept across
upgrades by `lookup`) would be made afresh by every GitOps render (`helm template` has no
cluster to look up), changing the Secret, the pods' checksum and, for the in-chart
databases, a password their data directory no longer accepts. Set these values, or keep
them in a Secret you manage (secrets.existingSecret).
*/}}
{{- define "lagtrace.postgresqlPassword" -}}
{{- required "postgresql.password is empty: set it (e.g. --set postgresql.password=$(openssl rand -hex 16)); the chart generates no secret" .Values.postgresql.password -}}
{{- end -}}

{{- define "lagtrace.redisPassword" -}}
{{- required "redis.password is empty: set it (e.g. --set redis.password=$(openssl rand -hex 16)); the chart generates no secret" .Values.redis.password -}}
{{- end -}}

{{/* Variables every lagtrace container gets: settings from the ConfigMap, secrets by key. */}}
{{- define "lagtrace.env" -}}
- name: LAGTRACE_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "lagtrace.secretName" . }}
      key: database-url
- name: LAGTRACE_BROKER_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "lagtrace.secretName" . }}
      key: broker-url
- name: LAGTRACE_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "lagtrace.secretName" . }}
      key: secret-key
- name: LAGTRACE_GITHUB_WEBHOOK_SECRET
  valueFrom:
    secretKeyRef:
      name: {{ include "lagtrace.secretName" . }}
      key: github-webhook-secret
      optional: true
- name: LAGTRACE_GITHUB_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "lagtrace.secretName" . }}
      key: github-token
      optional: true
- name: LAGTRACE_METRICS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "lagtrace.secretName" . }}
      key: metrics-token
      optional: true
{{- if and .Values.artifacts.s3.bucket .Values.artifacts.s3.existingSecret }}
- name: LAGTRACE_ARTIFACTS_S3_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ .Values.artifacts.s3.existingSecret }}
      key: access-key-id
- name: LAGTRACE_ARTIFACTS_S3_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.artifacts.s3.existingSecret }}
      key: secret-access-key
{{- end }}
{{- end -}}

{{- define "lagtrace.envFrom" -}}
- configMapRef:
    name: {{ include "lagtrace.fullname" . }}
{{- with .Values.extraEnvFrom }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The schema gate for pods that need the database at head (trial installs only). */}}
{{- define "lagtrace.waitForSchema" -}}
{{- if and .Values.migrations.enabled .Values.postgresql.enabled }}
- name: wait-for-schema
  image: {{ include "lagtrace.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  # Polls until the post-install migration Job has brought the schema to head.
  command: ["sh", "-c", "until lagtrace migrate --check; do sleep 5; done"]
  envFrom:
    {{- include "lagtrace.envFrom" . | nindent 4 }}
  env:
    {{- include "lagtrace.env" . | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.migrations.resources | nindent 4 }}
  volumeMounts:
    - name: tmp
      mountPath: /tmp
{{- end }}
{{- end -}}

{{/* Hook annotations of the migration Job and what it reads before the release exists. */}}
{{- define "lagtrace.migrationHook" -}}
{{- if .Values.postgresql.enabled -}}
post-install,post-upgrade
{{- else -}}
pre-install,pre-upgrade
{{- end -}}
{{- end -}}

{{/* Render-time checks: values that cannot work are refused with a reason. */}}
{{- define "lagtrace.validate" -}}
{{- $t := .Values.timeLimits -}}
{{- if not (lt (int $t.taskSoftSeconds) (int $t.taskHardSeconds)) -}}
{{- fail (printf "timeLimits.taskSoftSeconds (%v) must be below timeLimits.taskHardSeconds (%v)" $t.taskSoftSeconds $t.taskHardSeconds) -}}
{{- end -}}
{{- if not (lt (int $t.taskHardSeconds) (int $t.brokerVisibilitySeconds)) -}}
{{- fail (printf "timeLimits.taskHardSeconds (%v) must be below timeLimits.brokerVisibilitySeconds (%v): a task outliving the visibility timeout is delivered to a second worker" $t.taskHardSeconds $t.brokerVisibilitySeconds) -}}
{{- end -}}
{{- if lt (int .Values.worker.terminationGracePeriodSeconds) 30 -}}
{{- fail (printf "worker.terminationGracePeriodSeconds (%v) must be at least 30: a stopping worker removes its step's containers and checkout and gives the step back before it is killed" .Values.worker.terminationGracePeriodSeconds) -}}
{{- end -}}
{{- if and (eq .Values.engine.mode "external") (not .Values.engine.external.host) (not .Values.engine.external.hostSocketPath) -}}
{{- fail "engine.mode=external needs engine.external.host or engine.external.hostSocketPath" -}}
{{- end -}}
{{- if and (gt (int .Values.worker.concurrency) 1) (not .Values.worker.packDisjointCores) -}}
{{- fail "worker.concurrency above 1 needs worker.packDisjointCores: two runs on one worker measure each other" -}}
{{- end -}}
{{- range $name, $value := .Values.config.extraEnv -}}
{{- if eq $name "LAGTRACE_DOCKER_PREPARE_NETWORK" -}}
{{- fail (printf "config.extraEnv.LAGTRACE_DOCKER_PREPARE_NETWORK=%v: the chart sets it (the sealed index network with packageIndex.url, else none); the prepare step runs repository code and never gets the pod's network" $value) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.worker.autoscaling.enabled (not .Values.redis.enabled) (not .Values.worker.autoscaling.redis.address) -}}
{{- fail "worker.autoscaling needs worker.autoscaling.redis.address (host:port of the broker)" -}}
{{- end -}}
{{- end -}}

{{- define "lagtrace.databaseUrl" -}}
{{- if .Values.postgresql.enabled -}}
{{- printf "postgresql+psycopg://%s:%s@%s-postgresql:5432/%s" .Values.postgresql.username (include "lagtrace.postgresqlPassword" . | urlquery) (include "lagtrace.fullname" .) .Values.postgresql.database -}}
{{- else -}}
{{- .Values.secrets.databaseUrl -}}
{{- end -}}
{{- end -}}

{{- define "lagtrace.brokerUrl" -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://:%s@%s-redis:6379/0" (include "lagtrace.redisPassword" . | urlquery) (include "lagtrace.fullname" .) -}}
{{- else -}}
{{- .Values.secrets.brokerUrl -}}
{{- end -}}
{{- end -}}

{{- define "lagtrace.artifactsVolume" -}}
{{- if .Values.artifacts.persistence.enabled -}}
persistentVolumeClaim:
  claimName: {{ .Values.artifacts.persistence.existingClaim | default (printf "%s-artifacts" (include "lagtrace.fullname" .)) }}
{{- else -}}
emptyDir: {}
{{- end -}}
{{- end -}}

{{/* What is missing before the release can run; NOTES.txt prints it. */}}
{{- define "lagtrace.missing" -}}
{{- if and (not .Values.secrets.existingSecret) (not .Values.postgresql.enabled) (not .Values.secrets.databaseUrl) }}
- a database: set secrets.databaseUrl, secrets.existingSecret, or postgresql.enabled=true (trials)
{{- end }}
{{- if and (not .Values.secrets.existingSecret) (not .Values.redis.enabled) (not .Values.secrets.brokerUrl) }}
- a broker: set secrets.brokerUrl, secrets.existingSecret, or redis.enabled=true (trials)
{{- end }}
{{- if and (not .Values.secrets.existingSecret) (not .Values.secrets.secretKey) }}
- a secret key: set secrets.secretKey (openssl rand -hex 32) or secrets.existingSecret; none is generated
{{- end }}
{{- end -}}
