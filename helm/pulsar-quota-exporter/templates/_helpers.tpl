{{/*
Names and labels shared by every template.
*/}}

{{- define "pqe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: RELEASE-CHART, or RELEASE alone when it already contains the chart name.
Truncated to 63 characters (DNS label limit).
*/}}
{{- define "pqe.fullname" -}}
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

{{- define "pqe.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Standard labels of every resource. */}}
{{- define "pqe.labels" -}}
helm.sh/chart: {{ include "pqe.chart" . }}
{{ include "pqe.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: pulsar
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that identify the pods; immutable in a Deployment's selector, so kept minimal. */}}
{{- define "pqe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pqe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "pqe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pqe.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "pqe.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/* The mapping at config.exposition, or an empty one. */}}
{{- define "pqe.exposition" -}}
{{- $config := .Values.config | default dict }}
{{- toYaml ((index $config "exposition") | default dict) }}
{{- end }}

{{/* "HTTPS" when the exporter serves TLS (config.exposition.tls, the web config file's
tls_server_config, or webConfig.tls for an existing Secret), else "HTTP". */}}
{{- define "pqe.scheme" -}}
{{- $exposition := include "pqe.exposition" . | fromYaml }}
{{- $web := include "pqe.webConfig" . | fromYaml }}
{{- $webTls := (index $web "tls_server_config") | default dict }}
{{- if or (index $exposition "tls") (index $webTls "cert_file") .Values.webConfig.tls }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/* The mapping at webConfig.config (the exporter-toolkit web config file), or an empty one. */}}
{{- define "pqe.webConfig" -}}
{{- toYaml (.Values.webConfig.config | default dict) }}
{{- end }}

{{/* "true" when a web config file is given (inline or as an existing Secret), else "". */}}
{{- define "pqe.webConfigOn" -}}
{{- if or .Values.webConfig.existingSecret .Values.webConfig.config }}true{{ end }}
{{- end }}

{{/* "true" when the endpoints may demand credentials a kubelet probe does not have: basic
auth or a required client certificate (an existing Secret's content is unknown: assumed). */}}
{{- define "pqe.probeByTcp" -}}
{{- $exposition := include "pqe.exposition" . | fromYaml }}
{{- $web := include "pqe.webConfig" . | fromYaml }}
{{- $webTls := (index $web "tls_server_config") | default dict }}
{{- if or (index $exposition "basic_auth") .Values.webConfig.existingSecret (index $web "basic_auth_users") (eq (toString (index $webTls "client_auth_type")) "RequireAndVerifyClientCert") }}true{{ end }}
{{- end }}

{{/*
The exporter's config file: .Values.config with exposition.listen set to 0.0.0.0:containerPort,
the only address the Service and the probes can reach. A different listen set by the user
fails the render rather than being silently replaced. With perBroker.enabled, sources.brokers
is perBroker.metricsUrl and the participant is the pod's name (read with --config.expand-env);
otherwise the replicas are one participant, the release's full name unless config names one
(one replica reports for it, the holder of its reporter lease).
*/}}
{{- define "pqe.configFile" -}}
{{- $config := deepCopy (.Values.config | default dict) }}
{{- $exposition := deepCopy ((index $config "exposition") | default dict) }}
{{- $listen := printf "0.0.0.0:%d" (int .Values.containerPort) }}
{{- $given := index $exposition "listen" }}
{{- if and $given (ne (toString $given) $listen) }}
{{- fail (printf "config.exposition.listen is set by the chart to %s (from containerPort); remove it and set containerPort instead" $listen) }}
{{- end }}
{{- $_ := set $exposition "listen" $listen }}
{{- $_ := set $config "exposition" $exposition }}
{{- if .Values.perBroker.enabled }}
{{- $sources := deepCopy ((index $config "sources") | default dict) }}
{{- $engine := deepCopy ((index $config "resource_group_engine") | default dict) }}
{{- $_ := set $sources "brokers" (list (dict "url" .Values.perBroker.metricsUrl)) }}
{{- $_ := set $engine "participant" "${POD_NAME}" }}
{{- $_ := set $config "sources" $sources }}
{{- $_ := set $config "resource_group_engine" $engine }}
{{- else }}
{{- $engine := deepCopy ((index $config "resource_group_engine") | default dict) }}
{{- if not (index $engine "participant") }}
{{- $_ := set $engine "participant" (include "pqe.fullname" .) }}
{{- $_ := set $config "resource_group_engine" $engine }}
{{- end }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* Path of the admin token file named by the config, or "" when none. */}}
{{- define "pqe.tokenFile" -}}
{{- $config := .Values.config | default dict }}
{{- $sources := (index $config "sources") | default dict }}
{{- $admin := (index $sources "admin") | default dict }}
{{- (index $admin "token_file") | default "" }}
{{- end }}

{{- /*
The scrape endpoint of the ServiceMonitor (prometheus-operator) and of the VMServiceScrape
(VictoriaMetrics operator), from serviceMonitor's settings. The two CRDs spell the endpoint
alike but for the relabelings: `relabelings`/`metricRelabelings` against
`relabelConfigs`/`metricRelabelConfigs` (the VM operator's api/operator/v1beta1, Endpoint).
Called with (dict "root" $ "vm" bool).
*/}}
{{- define "pqe.scrapeEndpoint" -}}
{{- $root := .root }}
{{- $sm := $root.Values.serviceMonitor }}
{{- $relabel := ternary "relabelConfigs" "relabelings" .vm }}
{{- $metricRelabel := ternary "metricRelabelConfigs" "metricRelabelings" .vm }}
- port: http-metrics
  path: /metrics
  scheme: {{ include "pqe.scheme" $root | lower }}
  {{- with $sm.interval }}
  interval: {{ . }}
  {{- end }}
  {{- with $sm.scrapeTimeout }}
  scrapeTimeout: {{ . }}
  {{- end }}
  # The exporter's `namespace` label is the Pulsar namespace: keep it (see values.yaml).
  honorLabels: {{ $sm.honorLabels }}
  {{- with $sm.tlsConfig }}
  tlsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $sm.basicAuth }}
  basicAuth:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{ $relabel }}:
    # The alert rules select this job; the operator would otherwise use the Service name.
    - action: replace
      targetLabel: job
      replacement: {{ $sm.job | quote }}
    {{- with $sm.relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $sm.metricRelabelings }}
  {{ $metricRelabel }}:
    {{- toYaml . | nindent 4 }}
{{- end }}
{{- end }}

{{- /*
The alert rule groups of the PrometheusRule and of the VMRule (the VM operator's RuleGroup
has the same fields). They come from files/rules/*.rules.yaml, generated from
alerts/*.rules.yaml by `pulsar-quota-exporter generate`, read with .Files.Get and
re-serialised with toYaml, so the Prometheus templates in their annotations
({{ $labels.topic }}) are data here, never evaluated by Helm. Every expression selects the
exporter's series with the generator's default selector, job="pulsar-quota-exporter"; it is
rewritten to the job the scrape sets (serviceMonitor.job), so the rules follow the chart's
job, never a broker's same-named series.
*/}}
{{- define "pqe.ruleGroups" -}}
{{- $pr := .Values.prometheusRule }}
{{- $generated := "job=\"pulsar-quota-exporter\"" }}
{{- $selector := printf "job=%q" .Values.serviceMonitor.job }}
{{- range $path, $_ := .Files.Glob "files/rules/*.rules.yaml" }}
{{- range $group := (($.Files.Get $path | fromYaml).groups) }}
{{- $rules := list }}
{{- range $rule := $group.rules }}
{{- if not (has $rule.alert $pr.disabledAlerts) }}
{{- $_ := set $rule "expr" (replace $generated $selector $rule.expr) }}
{{- if $pr.additionalRuleLabels }}
{{- $_ := set $rule "labels" (merge (dict) ($rule.labels | default dict) $pr.additionalRuleLabels) }}
{{- end }}
{{- $rules = append $rules $rule }}
{{- end }}
{{- end }}
{{- if $rules }}
{{- $_ := set $group "rules" $rules }}
- {{ toYaml $group | nindent 2 | trim }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
