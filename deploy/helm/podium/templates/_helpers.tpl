{{/* Names and labels */}}
{{- define "podium.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "podium.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "podium.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "podium.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "podium.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "podium.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Secrets: the chart's own unless the user names theirs */}}
{{- define "podium.redisSecret" -}}
{{- .Values.redis.existingSecret | default (printf "%s-redis" (include "podium.fullname" .)) -}}
{{- end -}}

{{- define "podium.postgresSecret" -}}
{{- .Values.postgres.existingSecret | default (printf "%s-postgres" (include "podium.fullname" .)) -}}
{{- end -}}

{{- define "podium.postgresHost" -}}
{{- if not .Values.postgres.host -}}
{{- fail "postgres.enabled: say where PostgreSQL is (postgres.host); this chart runs no database" -}}
{{- end -}}
{{- if or (contains "." .Values.postgres.host) (contains ":" .Values.postgres.host) -}}
{{- .Values.postgres.host -}}
{{- else -}}
{{- printf "%s.%s.svc" .Values.postgres.host .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- define "podium.keysSecret" -}}
{{- .Values.auth.existingSecret | default (printf "%s-keys" (include "podium.fullname" .)) -}}
{{- end -}}

{{- define "podium.hasRedisPassword" -}}
{{- if or .Values.redis.password .Values.redis.existingSecret -}}true{{- end -}}
{{- end -}}

{{- define "podium.hasKeys" -}}
{{- if or .Values.auth.keys .Values.auth.existingSecret -}}true{{- end -}}
{{- end -}}

{{/* Pool P's queue: the stream `podium worker --pool P` reads (podium.queue.redis) */}}
{{- define "podium.streamKey" -}}
{{- printf "%s:queue:%s" .prefix .pool -}}
{{- end -}}

{{/* Every namespace the chart puts Podium pods in: the release's, then each pool's */}}
{{- define "podium.namespaces" -}}
{{- $all := list .Release.Namespace -}}
{{- range .Values.pools -}}
{{- $all = append $all (.namespace | default $.Release.Namespace) -}}
{{- end -}}
{{- $all | uniq | toJson -}}
{{- end -}}

{{/*
Redis's host as every pod (and KEDA's operator, in its own namespace) must name it: a bare
Service name is qualified with the release's namespace.
*/}}
{{- define "podium.redisHost" -}}
{{- if contains "." .Values.redis.host -}}
{{- .Values.redis.host -}}
{{- else -}}
{{- printf "%s.%s.svc" .Values.redis.host .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* PostgreSQL alone (postgres.use: queue): its queue and store, no Redis anywhere */}}
{{- define "podium.pgOnly" -}}
{{- if and .Values.postgres.enabled (eq (.Values.postgres.use | default "store") "queue") -}}true{{- end -}}
{{- end -}}

{{/* The environment every Podium container gets: Redis (with its password) unless
PostgreSQL alone, prefix, PostgreSQL as postgres.use says */}}
{{- define "podium.env" -}}
{{- if not (include "podium.pgOnly" .) }}
{{- if include "podium.hasRedisPassword" . }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "podium.redisSecret" . }}
      key: {{ .Values.redis.existingSecretKey }}
- name: PODIUM_SERVER__REDIS
  value: "redis://:$(REDIS_PASSWORD)@{{ include "podium.redisHost" . }}:{{ .Values.redis.port }}/{{ .Values.redis.db }}"
{{- else }}
- name: PODIUM_SERVER__REDIS
  value: "redis://{{ include "podium.redisHost" . }}:{{ .Values.redis.port }}/{{ .Values.redis.db }}"
{{- end }}
{{- end }}
- name: PODIUM_SERVER__PREFIX
  value: {{ .Values.prefix | quote }}
{{- if .Values.postgres.enabled }}
{{- $pg := .Values.postgres }}
{{- $use := $pg.use | default "store" }}
{{- $names := list "PODIUM_SERVER__STORE" }}
{{- if eq $use "archive" }}{{ $names = list "PODIUM_SERVER__ARCHIVE" }}{{ end }}
{{- if eq $use "queue" }}{{ $names = list "PODIUM_SERVER__STORE" "PODIUM_SERVER__QUEUE" }}{{ end }}
{{- $who := $pg.user }}
{{- if or $pg.password $pg.existingSecret }}
{{- $who = printf "%s:$(POSTGRES_PASSWORD)" $pg.user }}
- name: POSTGRES_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "podium.postgresSecret" . }}
      key: {{ $pg.existingSecretKey }}
{{- end }}
{{- range $names }}
- name: {{ . }}
  value: "postgresql://{{ $who }}@{{ include "podium.postgresHost" $ }}:{{ $pg.port }}/{{ $pg.database }}"
{{- end }}
{{- end }}
{{- end -}}

{{/* The API keys: the gateways' only (workers never see a client) */}}
{{- define "podium.keysEnv" -}}
{{- if include "podium.hasKeys" . }}
- name: PODIUM_KEYS
  valueFrom:
    secretKeyRef:
      name: {{ include "podium.keysSecret" . }}
      key: {{ .Values.auth.existingSecretKey }}
{{- end }}
{{- end -}}

{{- define "podium.volumes" -}}
- name: config
  configMap:
    name: {{ include "podium.fullname" . }}-config
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- end -}}

{{- define "podium.volumeMounts" -}}
- name: config
  mountPath: /etc/podium
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/*
The gateway's grace: its drain (server.drain_grace_s, plus the 2 s uvicorn is given to end
streams), the preStop sleep, a margin. A value set by hand below drain + 2 + preStop fails.
*/}}
{{- define "podium.gatewayTermination" -}}
{{- $g := .Values.gateway -}}
{{- $floor := add (int $g.drainGraceSeconds) 2 (int $g.preStopSeconds) -}}
{{- if kindIs "invalid" $g.terminationGracePeriodSeconds -}}
{{- add $floor (int $g.marginSeconds) -}}
{{- else if le (int $g.terminationGracePeriodSeconds) $floor -}}
{{- fail (printf "gateway.terminationGracePeriodSeconds (%d) must exceed drainGraceSeconds + 2 + preStopSeconds (%d): the kill would cut the drain short" (int $g.terminationGracePeriodSeconds) $floor) -}}
{{- else -}}
{{- int $g.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/*
A worker's grace: --grace (steps finish), the preStop, a margin for handing the rest back.
Called with (dict "root" $ "pool" $pool).
*/}}
{{- define "podium.workerTermination" -}}
{{- $w := .root.Values.worker -}}
{{- $grace := int (.pool.grace | default $w.grace) -}}
{{- $floor := add $grace (int $w.preStopSeconds) -}}
{{- if kindIs "invalid" $w.terminationGracePeriodSeconds -}}
{{- add $floor (int $w.marginSeconds) -}}
{{- else if le (int $w.terminationGracePeriodSeconds) $floor -}}
{{- fail (printf "worker.terminationGracePeriodSeconds (%d) must exceed the pool %s's grace + preStopSeconds (%d): runs would be killed before they are handed back" (int $w.terminationGracePeriodSeconds) .pool.name $floor) -}}
{{- else -}}
{{- int $w.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* Processes per worker pod: `cpu` pinned ones with pinning, else one unpinned */}}
{{- define "podium.procs" -}}
{{- $pinning := ternary .pool.pinning .root.Values.worker.pinning (hasKey .pool "pinning") -}}
{{- if $pinning -}}
{{- if not (regexMatch "^[1-9][0-9]*$" (toString .pool.cpu)) -}}
{{- fail (printf "pool %s: pinning needs a whole number of CPUs (Guaranteed QoS, static CPU manager), got cpu=%v" .pool.name .pool.cpu) -}}
{{- end -}}
{{- $procs := int (.pool.procs | default .pool.cpu) -}}
{{- if gt $procs (int .pool.cpu) -}}
{{- fail (printf "pool %s: procs (%d) above its cpu (%v): pinned processes would share cores" .pool.name $procs .pool.cpu) -}}
{{- end -}}
{{- $procs -}}
{{- else -}}
{{- if gt (int (.pool.procs | default 0)) 0 -}}
{{- fail (printf "pool %s: procs needs worker.pinning (podium worker --procs pins each process to a CPU; without exclusive cores they would pile onto the node's first CPUs): use replicas instead" .pool.name) -}}
{{- end -}}
0
{{- end -}}
{{- end -}}

{{/* Runs one worker pod drives at once at full load */}}
{{- define "podium.podCapacity" -}}
{{- $procs := int (include "podium.procs" .) -}}
{{- mul (max $procs 1) (int (.pool.concurrency | default .root.Values.worker.concurrency)) -}}
{{- end -}}

{{/* Outstanding runs per replica the autoscaler aims at: capacity x utilization */}}
{{- define "podium.workerTarget" -}}
{{- $pct := int ((.pool.keda | default dict).targetUtilizationPercent | default 80) -}}
{{- max 1 (div (mul (int (include "podium.podCapacity" .)) $pct) 100) -}}
{{- end -}}
