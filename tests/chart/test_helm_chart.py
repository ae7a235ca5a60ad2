"""The Helm chart, linted and rendered by Helm itself (helm-python-sdk bundles Helm v4).

Rendered core manifests are validated against Kubernetes' OpenAPI schemas
(kubernetes-validate, offline) and the pod against the `restricted` Pod Security Standard by
Kubernetes' own admission library; the prometheus-operator kinds are checked here for what
matters to this exporter (selection, job label, rule groups), and against the operator's CRD
schemas in test_checked_by_cluster_tools.py.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

import exporter
from exporter import cli
from exporter.config.load import ConfigError, load
from exporter.generate import alerts, dashboards
from exporter.generate import all as generate_all
from exporter.generate import helm as helm_generate
from exporter.generate.thresholds import DEFAULT_SELECTOR, EXPORTER_JOB
from tests.harness import go_tools

# Helm's own Go code renders the chart here (helm-python-sdk's native library): a tool.
pytestmark = pytest.mark.tools
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "pulsar-quota-exporter"
# The custom resources the chart renders, by the API group that defines them.
CRD_KINDS = {"ServiceMonitor": "monitoring.coreos.com/v1",
             "PrometheusRule": "monitoring.coreos.com/v1",
             "VMServiceScrape": "operator.victoriametrics.com/v1beta1",
             "VMRule": "operator.victoriametrics.com/v1beta1"}
CONFIG_DIR = "/etc/pulsar-quota-exporter"

# Every optional feature on, with non-default values wherever a template branches.
ALL_ON: dict[str, Any] = {
    "replicas": 2,
    "strategy": {"type": "Recreate"},
    "image": {"tag": "9.9.9", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "logLevel": "debug",
    "logFormat": "json",
    "extraArgs": ["--web.listen-address=0.0.0.0:10049"],
    "env": [{"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx1g"}],
    "envFrom": [{"secretRef": {"name": "extra-env"}}],
    "config": {
        "cluster": "prod-eu",
        "check_interval": "30s",
        "sources": {
            "brokers": [{"url": "http://pulsar-broker:8080/metrics", "timeout": "5s"}],
            "admin": {"url": "https://pulsar-broker:8443",
                      "token_file": "/var/run/secrets/pulsar/token"},
            "service_url": "pulsar://pulsar-broker:6650",
        },
        "backlog_quotas": {
            "default": {"limit_size": "10GiB", "limit_time": "1h"},
            "namespaces": {"public/orders": {"limit_time": "10m",
                                             "policy": "consumer_backlog_eviction"}},
            "enforce": True,
        },
        "resource_groups": {"rg-gold": {
            "publish": {"messages_per_second": 1000000, "bytes_per_second": 10485760},
            "tenants": ["gold"],
        }},
        "spark": {"conf": {"spark.sql.shuffle.partitions": 4}},
    },
    "containerPort": 9000,
    "rollOnConfigChange": True,
    "adminToken": {"existingSecret": "pulsar-admin-token", "key": "jwt"},
    "tmp": {"sizeLimit": "2Gi", "medium": "Memory"},
    "podAnnotations": {"example.com/a": "b"},
    "podLabels": {"team": "streaming"},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "pulsar",
                     "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                   "whenUnsatisfiable": "ScheduleAnyway"}],
    "priorityClassName": "monitoring",
    "extraVolumes": [{"name": "ca", "configMap": {"name": "pulsar-ca"}}],
    "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/pulsar-ca", "readOnly": True}],
    "serviceAccount": {"create": True, "name": "pqe", "annotations": {"a": "b"}},
    "service": {"type": "NodePort", "port": 8080, "annotations": {"a": "b"},
                "labels": {"extra": "yes"}},
    "serviceMonitor": {"enabled": True, "namespace": "monitoring",
                       "additionalLabels": {"release": "kube-prometheus-stack"},
                       "interval": "30s", "scrapeTimeout": "10s",
                       "relabelings": [{"action": "labeldrop", "regex": "pod"}],
                       "metricRelabelings": [{"action": "drop", "regex": "go_.*",
                                              "sourceLabels": ["__name__"]}]},
    "prometheusRule": {"enabled": True, "namespace": "monitoring",
                       "additionalLabels": {"release": "kube-prometheus-stack"}},
    "victoriaMetrics": {"serviceScrape": {"enabled": True, "namespace": "vm",
                                          "additionalLabels": {"vmagent": "pulsar"}},
                        "rule": {"enabled": True, "additionalLabels": {"vmalert": "pulsar"}}},
    "dashboards": {"enabled": True, "namespace": "grafana",
                   "annotations": {"grafana_folder": "Pulsar"}},
    "podDisruptionBudget": {"enabled": True, "minAvailable": 1, "maxUnavailable": None},
    "networkPolicy": {"enabled": True, "ingressFrom": [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}], "egress": [
        {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        {"to": [{"podSelector": {"matchLabels": {"component": "broker"}}}],
         "ports": [{"port": 8080, "protocol": "TCP"}, {"port": 6650, "protocol": "TCP"}]}]},
}


def render(values: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """`helm template rel CHART -n pulsar -f values`, parsed; NOTES.txt left out."""
    with helm.Chart.load(CHART) as chart:
        out = chart.render(copy.deepcopy(dict(values or {})), name="rel", namespace="pulsar")
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def notes(values: Mapping[str, Any] | None = None) -> str:
    with helm.Chart.load(CHART) as chart:
        out = chart.render(copy.deepcopy(dict(values or {})), name="rel", namespace="pulsar")
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


def one(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"{kind}*{name_suffix}: {[d['metadata']['name'] for d in found]}"
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return c


def config_map(docs: list[dict[str, Any]]) -> dict[str, Any]:
    cms = [d for d in docs if d["kind"] == "ConfigMap" and "config.yaml" in d["data"]]
    assert len(cms) == 1
    return cms[0]


def lint_problems(values: Mapping[str, Any] | None, kube_version: str) -> list[dict]:
    report = helm.lint(CHART, values=dict(values) if values is not None else None,
                       strict=True, kube_version=kube_version)
    return [m for m in report["messages"] if m["severity"] >= 2] + [
        {"severity": 3, "error": e} for e in report["errors"]]


def min_kube_version() -> str:
    spec = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=\s*(\d+\.\d+)\.\d+(-0)?", spec)
    assert match, spec
    return match.group(1)


KUBE_VERSIONS = (min_kube_version(), kubernetes_validate.latest_version())


# --- chart metadata and lint ----------------------------------------------------------------
def test_chart_app_version_is_the_exporter_version():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == exporter.__version__


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_lint_is_clean(values, kube):
    assert lint_problems(values, kube + ".0") == []


def test_lint_reports_a_broken_template(tmp_path):
    broken = tmp_path / "pulsar-quota-exporter"
    _copy_chart(broken)
    (broken / "templates" / "service.yaml").write_text("{{ .Values.service.port | nosuchfn }}\n")
    report = helm.lint(broken, strict=True)
    assert report["errors"] or any(m["severity"] == 3 for m in report["messages"])


def _copy_chart(dest: Path) -> None:
    for path in CHART.rglob("*"):
        if path.is_file():
            target = dest / path.relative_to(CHART)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())


# --- values.schema.json -----------------------------------------------------------------------
def test_schema_is_draft7_and_accepts_the_default_values():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    jsonschema.Draft7Validator.check_schema(schema)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(defaults)
    jsonschema.Draft7Validator(schema).validate(coalesce(defaults, ALL_ON))


def coalesce(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of user values into the chart's: maps merge, null deletes, rest replaces."""
    merged = dict(defaults)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = value
    return merged


@pytest.mark.parametrize("bad, where", [
    ({"replicas": "two"}, "replicas"),
    ({"replica": 2}, "replica"),  # a typo at the top level
    ({"service": {"port": 99999}}, "port"),
    ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    ({"serviceMonitor": {"enabled": "yes"}}, "enabled"),
    ({"config": {"cluster": ""}}, "cluster"),
])
def test_schema_rejects_bad_values_through_helm(bad, where):
    problems = lint_problems(bad, KUBE_VERSIONS[-1] + ".0")
    assert any(where in str(p.get("error")) for p in problems), problems
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match=where):
        chart.render(bad, name="rel", namespace="pulsar")


# --- rendering --------------------------------------------------------------------------------
def test_defaults_render_the_core_objects_only():
    kinds = sorted(d["kind"] for d in render())
    assert kinds == ["ConfigMap", "Deployment", "Service", "ServiceAccount"]


def test_every_optional_feature_renders():
    kinds = sorted(d["kind"] for d in render(ALL_ON))
    assert kinds == ["ConfigMap", "ConfigMap", "Deployment", "NetworkPolicy",
                     "PodDisruptionBudget", "PrometheusRule", "Service", "ServiceAccount",
                     "ServiceMonitor", "VMRule", "VMServiceScrape"]


def test_network_policy_opens_the_metrics_port_only_and_restricts_egress_when_asked():
    policy = one(render(ALL_ON), "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"] == one(
        render(ALL_ON), "Deployment")["spec"]["selector"]["matchLabels"]
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": "http-metrics", "protocol": "TCP"}]
    assert ingress["from"] == ALL_ON["networkPolicy"]["ingressFrom"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["egress"] == ALL_ON["networkPolicy"]["egress"]
    open_egress = one(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy")["spec"]
    assert open_egress["policyTypes"] == ["Ingress"] and "egress" not in open_egress
    assert "from" not in open_egress["ingress"][0]


# Pod Security Standards, profile `restricted`: judged by Kubernetes' own pod-security admission
# library (tests/tools/pss, built by tests/harness/go_tools.py), as a namespace labelled
# pod-security.kubernetes.io/enforce=restricted would judge the pod.

def restricted_violations(workload: dict[str, Any]) -> list[str]:
    """What the admission forbids in the workload's pod template: its reasons with details."""
    if not go_tools.installed():
        pytest.fail("pss is not built: run `python -m tests.harness.go_tools` (./dev test does)")
    (verdict,) = go_tools.pod_security([workload])
    assert verdict["allowed"] == (verdict["reasons"] == []), verdict
    return [f"{r}: {d}" if d else r
            for r, d in zip(verdict["reasons"], verdict["details"], strict=True)]


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
def test_the_pod_meets_the_restricted_pod_security_standard(values):
    assert restricted_violations(one(render(values), "Deployment")) == []


def test_the_restricted_check_can_fail():
    loose = {"podSecurityContext": {"runAsNonRoot": False, "runAsUser": 0},
             "securityContext": {"allowPrivilegeEscalation": True, "capabilities": {"drop": []}},
             "extraVolumes": [{"name": "host", "hostPath": {"path": "/var/log"}}],
             "extraVolumeMounts": [{"name": "host", "mountPath": "/host"}]}
    found = " | ".join(restricted_violations(one(render(loose), "Deployment")))
    for reason in ("allowPrivilegeEscalation != false", "unrestricted capabilities",
                   "runAsNonRoot != true", "runAsUser=0",
                   'restricted volume types: volume "host" uses restricted volume type "hostPath"'):
        assert reason in found, found


@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_core_manifests_validate_against_kubernetes_schemas(values, kube):
    validated = []
    for doc in render(values):
        if doc["kind"] in CRD_KINDS:
            assert doc["apiVersion"] == CRD_KINDS[doc["kind"]]
            continue
        # SchemaNotFoundError (a kind unknown to this version) fails the test, as it should.
        kubernetes_validate.validate(doc, kube, strict=True)
        validated.append(doc["kind"])
    assert "Deployment" in validated and "Service" in validated


def test_kubernetes_validate_catches_a_broken_manifest():
    """The validator used above does fail on a bad manifest (so its passing means something)."""
    deployment = one(render(), "Deployment")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBE_VERSIONS[-1], strict=True)


# --- config ---------------------------------------------------------------------------------
@pytest.mark.parametrize("values", [None, ALL_ON], ids=["defaults", "all-on"])
def test_rendered_config_passes_the_exporters_validation(values, tmp_path):
    docs = render(values)
    path = tmp_path / "config.yaml"
    text = config_map(docs)["data"]["config.yaml"]
    for secret in sorted(set(re.findall(r"(/var/run/secrets/[\w./-]+)", text))):
        # where the pod mounts it: a file the config names must exist when it loads
        staged = tmp_path / secret.lstrip("/")
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text("staged-0123456789abcdef\n")
        text = text.replace(secret, str(staged))
    path.write_text(text)
    config = load(path)  # raises ConfigError with every problem
    port = (values or {}).get("containerPort", 10049)
    assert config.exposition.listen == f"0.0.0.0:{port}"
    ports = container(docs)["ports"]
    assert [(p["name"], p["containerPort"]) for p in ports] == [("http-metrics", port)]
    if values:
        assert config.cluster == values["config"]["cluster"]
        assert config.resource_groups["rg-gold"].publish.bytes_per_second == 10485760


def test_exporter_validation_would_catch_a_bad_rendered_config(tmp_path):
    """The check above is not vacuous: a config the exporter rejects is reported."""
    docs = render({"config": {"check_interval": "soon"}})
    path = tmp_path / "config.yaml"
    path.write_text(config_map(docs)["data"]["config.yaml"])
    with pytest.raises(ConfigError, match="check_interval"):
        load(path)


def test_a_listen_address_in_config_fails_the_render():
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmRenderError,
                                                        match="containerPort"):
        chart.render({"config": {"exposition": {"listen": "127.0.0.1:10049"}}},
                     name="rel", namespace="pulsar")


def test_other_exposition_keys_are_kept():
    docs = render({"config": {"exposition": {"topic_level": False}}})
    text = yaml.safe_load(config_map(docs)["data"]["config.yaml"])
    assert text["exposition"] == {"topic_level": False, "listen": "0.0.0.0:10049"}


# --- the Deployment -------------------------------------------------------------------------
def test_container_runs_the_exporter_with_the_mounted_config():
    docs = render({"extraArgs": ["--log.level=debug"]})
    c = container(docs)
    assert c["command"] == ["pulsar-quota-exporter"]
    args = cli._parser().parse_args(c["args"])  # the real CLI accepts these flags
    assert args.command == "run"
    assert args.log_level == "debug"  # extraArgs come last and win
    assert args.log_format == "logfmt"
    assert cli._parser().parse_args(container(render(ALL_ON))["args"]).log_format == "json"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert os.path.join(mounts["config"], "config.yaml") == args.config
    assert mounts["config"] == CONFIG_DIR
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config_map(docs)["metadata"]["name"]
    assert "subPath" not in next(m for m in c["volumeMounts"] if m["name"] == "config")


def test_pod_is_locked_down_with_a_writable_tmp():
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    c = container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["automountServiceAccountToken"] is False
    tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
    assert tmp["emptyDir"] == {}
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_probes_use_healthz_and_readyz_on_the_metrics_port():
    c = container(render())
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics",
                                             "scheme": "HTTP"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics",
                                              "scheme": "HTTP"}


def test_probes_follow_tls_and_basic_auth():
    tls = {"config": {"exposition": {"tls": {"cert_file": "/c/tls.crt", "key_file": "/c/tls.key"}}}}
    docs = render(tls)
    assert container(docs)["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert one(docs, "Service")["spec"]["ports"][0]["appProtocol"] == "https"
    auth = {"config": {"exposition": {"basic_auth": {
        "prometheus": "$2b$10$KqI677T4a8We1qSJDfEZr./bXXHXGVv5GfM/h.Z7Cu.EUsAfj6YSW"}}}}
    c = container(render(auth))
    assert c["livenessProbe"]["tcpSocket"] == {"port": "http-metrics"}
    assert "httpGet" not in c["readinessProbe"]


def test_config_checksum_rolls_pods_on_config_change_only():
    def checksum(values):
        meta = one(render(values), "Deployment")["spec"]["template"]["metadata"]
        return meta.get("annotations", {}).get("checksum/config")

    base = checksum(None)
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    assert checksum({"replicas": 3}) == base
    assert checksum({"config": {"cluster": "other"}}) != base
    assert checksum({"rollOnConfigChange": False}) is None


def test_admin_token_secret_is_mounted_where_the_config_reads_it():
    docs = render(ALL_ON)
    token_file = ALL_ON["config"]["sources"]["admin"]["token_file"]
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (mount,) = [m for m in container(docs)["volumeMounts"] if m["name"] == "admin-token"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "admin-token"]
    assert volume["secret"]["secretName"] == "pulsar-admin-token"
    (item,) = volume["secret"]["items"]
    assert item["key"] == "jwt"
    assert os.path.join(mount["mountPath"], item["path"]) == token_file
    config = yaml.safe_load(config_map(docs)["data"]["config.yaml"])
    assert config["sources"]["admin"]["token_file"] == token_file


def test_admin_token_secret_without_a_token_file_fails_the_render():
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmRenderError, match="token_file"):
        chart.render({"adminToken": {"existingSecret": "s"}}, name="rel", namespace="pulsar")


def test_scheduling_and_extras_reach_the_pod():
    docs = render(ALL_ON)
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    for key in ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints",
                "priorityClassName", "imagePullSecrets"):
        assert pod[key] == ALL_ON[key], key
    c = container(docs)
    assert c["image"] == "ghcr.io/pulsar-quota-exporter/pulsar-quota-exporter:9.9.9"
    assert {"name": "JAVA_TOOL_OPTIONS", "value": "-Xmx1g"} in c["env"]
    assert c["envFrom"] == ALL_ON["envFrom"]
    assert c["args"][-1] == ALL_ON["extraArgs"][-1]
    assert {"name": "ca", "mountPath": "/etc/pulsar-ca", "readOnly": True} in c["volumeMounts"]


def test_default_image_tag_is_the_app_version():
    assert container(render())["image"].endswith(":" + exporter.__version__)


# --- Service and ServiceMonitor -------------------------------------------------------------
def test_service_selects_the_pods():
    docs = render()
    service = one(docs, "Service")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert port["name"] == "http-metrics"
    assert port["targetPort"] == container(docs)["ports"][0]["name"]


@pytest.mark.parametrize("values", [
    {"serviceMonitor": {"enabled": True}},
    ALL_ON,
], ids=["same-namespace", "monitoring-namespace"])
def test_servicemonitor_selects_the_service_and_its_port(values):
    docs = render(values)
    service, monitor = one(docs, "Service"), one(docs, "ServiceMonitor")
    spec = monitor["spec"]
    assert spec["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True  # keeps the exporter's Pulsar `namespace` label
    job = endpoint["relabelings"][0]
    assert (job["targetLabel"], job["replacement"]) == ("job", EXPORTER_JOB)


def test_the_charts_job_is_the_one_the_generated_rules_and_dashboards_select():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["serviceMonitor"]["job"] == EXPORTER_JOB
    assert f'job="{EXPORTER_JOB}"' == DEFAULT_SELECTOR
    for template in ("_helpers.tpl", "dashboards-configmap.yaml"):  # the rule groups: helpers
        text = (CHART / "templates" / template).read_text()
        assert "pulsar-quota-exporter\\" in text and "serviceMonitor.job" in text, template


@pytest.mark.parametrize("job", ["pulsar-exporter", "pulsar-quota-exporter"])
def test_rules_and_dashboards_follow_the_servicemonitor_job(job):
    """Rename the job and the PrometheusRule and dashboards select the new one; never a bare
    series a broker's own same-named PIP-323 metrics could match."""
    docs = render({"serviceMonitor": {"enabled": True, "job": job},
                   "prometheusRule": {"enabled": True}, "dashboards": {"enabled": True}})
    monitor = one(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["relabelings"][0]["replacement"] == job
    rule = one(docs, "PrometheusRule")
    originals = {r["alert"]: r["expr"] for g in alert_file_groups() for r in g["rules"]}
    rendered = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert rendered.keys() == originals.keys()
    for name, expr in rendered.items():
        assert expr == originals[name].replace(DEFAULT_SELECTOR, f'job="{job}"'), name
        assert f'{{job="{job}"' in expr, name
    cm = one(docs, "ConfigMap", "-dashboards")
    for name, text in cm["data"].items():
        committed = (CHART / "files" / "dashboards" / name).read_text(encoding="utf-8")
        assert text == committed.replace('job=\\"pulsar-quota-exporter\\"', f'job=\\"{job}\\"')
        doc = json.loads(text)
        exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
        assert exprs and all(f'{{job="{job}"' in e for e in exprs), name


def test_servicemonitor_passes_scrape_settings_and_labels():
    monitor = one(render(ALL_ON), "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("30s", "10s")
    assert endpoint["relabelings"][1:] == ALL_ON["serviceMonitor"]["relabelings"]
    assert endpoint["metricRelabelings"] == ALL_ON["serviceMonitor"]["metricRelabelings"]


# --- PrometheusRule -------------------------------------------------------------------------
def alert_file_groups() -> list[dict[str, Any]]:
    """The groups of alerts/*.rules.yaml in file-name order (the order .Files.Glob gives)."""
    groups = []
    for path in sorted((ROOT / "alerts").glob("*.rules.yaml")):
        groups += yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    return groups


def test_prometheusrule_groups_equal_the_alert_rule_files():
    rule = one(render({"prometheusRule": {"enabled": True}}), "PrometheusRule")
    expected = alert_file_groups()
    assert rule["spec"]["groups"] == expected
    assert len(expected) == len(alerts.RULE_FILES)


def test_prometheus_templates_in_annotations_survive_byte_for_byte():
    rule = one(render({"prometheusRule": {"enabled": True}}), "PrometheusRule")
    rendered = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    originals = [r for g in alert_file_groups() for r in g["rules"]]
    templated = 0
    for original in originals:
        for key, text in original["annotations"].items():
            assert rendered[original["alert"]]["annotations"][key] == text, (original, key)
            templated += "{{ $labels." in text or "{{ $value" in text
    assert templated >= len(originals)  # the check covers Prometheus templates


def test_prometheusrule_drops_disabled_alerts_and_adds_rule_labels():
    disabled = alerts.alerts()[0].name
    rule = one(render({"prometheusRule": {
        "enabled": True, "disabledAlerts": [disabled],
        "additionalRuleLabels": {"team": "pulsar", "severity": "ignored"}}}), "PrometheusRule")
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert disabled not in [r["alert"] for r in rules]
    assert len(rules) == len(alerts.alerts()) - 1
    original = {a.name: a for a in alerts.alerts()}
    for r in rules:
        assert r["labels"] == {**original[r["alert"]].labels, "team": "pulsar"}


def test_promtool_accepts_the_rendered_rule_groups(tmp_path, promtool):
    """With labels added and an alert dropped, the groups are still valid Prometheus rules
    (promtool from Debian's `prometheus`, as in test_alerts.py; a missing tool fails)."""
    rule = one(render({"prometheusRule": {
        "enabled": True, "disabledAlerts": [alerts.alerts()[0].name],
        "additionalRuleLabels": {"team": "pulsar"}}}), "PrometheusRule")
    path = tmp_path / "rendered.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(alerts.alerts()) - 1} rules found" in result.stdout


# --- dashboards -----------------------------------------------------------------------------
def test_dashboards_configmap_carries_every_dashboard_for_the_sidecar():
    cm = one(render(ALL_ON), "ConfigMap", "-dashboards")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Pulsar"}
    assert sorted(cm["data"]) == sorted(d.file for d in dashboards.DASHBOARDS)
    for name, text in cm["data"].items():
        assert text == (CHART / "files" / "dashboards" / name).read_text(encoding="utf-8")
    assert any("{{" in text for text in cm["data"].values())  # Grafana legends kept as data


def test_dashboards_are_under_the_configmap_size_limit():
    cm = one(render(ALL_ON), "ConfigMap", "-dashboards")
    # 1 MiB is the API limit; 256 KiB keeps `kubectl apply` (last-applied annotation) working.
    assert len(json.dumps(cm).encode()) < 256 * 1024


# --- generated chart files ------------------------------------------------------------------
def test_chart_files_are_exactly_the_generated_ones():
    expected = {p.relative_to(ROOT) for p in helm_generate.outputs(ROOT)}
    present = {p.relative_to(ROOT) for p in (CHART / "files").rglob("*") if p.is_file()}
    assert present == expected  # no stale copy left behind for .Files.Glob to pick up
    assert len(expected) == len(alerts.RULE_FILES) + len(dashboards.DASHBOARDS)


def test_generate_registers_the_chart_files_and_check_catches_drift():
    registered = generate_all.outputs(ROOT)
    for path, make in helm_generate.outputs(ROOT).items():
        assert path in registered
        current = path.read_text(encoding="utf-8")
        assert make(current) == current
        assert make(current + "# edited by hand\n") == current  # drift would be reported


def test_chart_rule_copies_parse_to_the_alert_files():
    for _, filename in alerts.RULE_FILES.values():
        copy_ = yaml.safe_load((CHART / "files" / "rules" / filename).read_text())
        original = yaml.safe_load((ROOT / "alerts" / filename).read_text())
        assert copy_ == original, filename


# --- NOTES.txt ------------------------------------------------------------------------------
def test_notes_say_whether_evictions_are_performed():
    assert "dry run" in notes()
    enforcing = notes(ALL_ON)
    assert "ON" in enforcing and "dry run" not in enforcing
    assert "port-forward service/rel-pulsar-quota-exporter" in notes()


def test_notes_name_the_victoria_metrics_resources_when_asked():
    assert "VMServiceScrape" not in notes() and "VMRule" not in notes()
    told = notes(ALL_ON)
    assert 'a VMServiceScrape scrapes port http-metrics as job="pulsar-quota-exporter"' in told
    assert "VMRule rel-pulsar-quota-exporter carries the exporter's alert rules" in told


PER_BROKER = {"perBroker": {"enabled": True, "brokers": 3,
                            "metricsUrl": "http://pulsar-broker-${POD_INDEX}.pulsar-broker:8080"
                                          "/metrics"},
              "config": {"sources": {"service_url": "pulsar://pulsar-broker:6650"},
                         "resource_groups": {"rg": {"publish": {"messages_per_second": 100},
                                                    "tenants": ["public"]}}}}


def test_per_broker_mode_is_a_statefulset_whose_pods_pick_their_broker(tmp_path: Path,
                                                                      monkeypatch):
    docs = render(PER_BROKER)
    assert not [d for d in docs if d["kind"] == "Deployment"]
    sts = one(docs, "StatefulSet")
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["serviceName"] == one(
        docs, "Service")["metadata"]["name"]
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    assert "--config.expand-env" in c["args"]
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in c["env"]}
    assert env["POD_NAME"] == "metadata.name"
    assert env["POD_INDEX"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert restricted_violations(sts) == []
    # What pod 2 reads: its broker, and itself as the participant.
    path = tmp_path / "config.yaml"
    path.write_text(config_map(docs)["data"]["config.yaml"])
    monkeypatch.setenv("POD_INDEX", "2")
    monkeypatch.setenv("POD_NAME", "rel-pulsar-quota-exporter-2")
    config = load(path, expand=True)
    assert [b.url for b in config.sources.brokers] == [
        "http://pulsar-broker-2.pulsar-broker:8080/metrics"]
    assert config.resource_group_engine.participant == "rel-pulsar-quota-exporter-2"
    with pytest.raises(ConfigError):
        load(path)  # without expansion the URL is no URL


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_per_broker_manifests_validate_against_kubernetes_schemas(kube):
    for doc in render(PER_BROKER):
        if doc["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(doc, kube, strict=True)


def test_per_broker_needs_kubernetes_1_28_for_the_pod_index(capfd):
    """Helm's lint logs a template's `fail` instead of reporting it: read the log."""
    assert lint_problems(PER_BROKER, "1.28.0") == []
    assert "Kubernetes >= 1.28" not in capfd.readouterr().err
    lint_problems(PER_BROKER, "1.27.0")
    assert "perBroker.enabled needs Kubernetes >= 1.28" in capfd.readouterr().err


# --- VictoriaMetrics operator resources ---------------------------------------------------------

# The VM operator spells a scrape endpoint as prometheus-operator does but for these two keys
# (its api/operator/v1beta1: EndpointRelabelings); a VMRule's groups are a PrometheusRule's.
VM_ENDPOINT_KEYS = {"relabelings": "relabelConfigs", "metricRelabelings": "metricRelabelConfigs"}
SECURED_SCRAPE = {"tlsConfig": {"ca": {"secret": {"name": "pqe-tls", "key": "ca.crt"}},
                                "serverName": "pqe.pulsar.svc"},
                  "basicAuth": {"username": {"name": "pqe-auth", "key": "user"},
                                "password": {"name": "pqe-auth", "key": "password"}}}


def _as_vm(monitor_spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(monitor_spec)
    spec["endpoints"] = [{VM_ENDPOINT_KEYS.get(k, k): v for k, v in e.items()}
                         for e in spec["endpoints"]]
    return spec


def test_victoria_metrics_resources_carry_the_servicemonitors_scrape_and_the_rules():
    values = copy.deepcopy(ALL_ON)
    values["serviceMonitor"].update(SECURED_SCRAPE)
    docs = render(values)
    monitor, scrape = one(docs, "ServiceMonitor"), one(docs, "VMServiceScrape")
    assert scrape["apiVersion"] == "operator.victoriametrics.com/v1beta1"
    assert scrape["metadata"]["namespace"] == "vm"
    assert scrape["metadata"]["labels"]["vmagent"] == "pulsar"
    assert scrape["spec"] == _as_vm(monitor["spec"])
    (endpoint,) = scrape["spec"]["endpoints"]
    assert endpoint["tlsConfig"] == SECURED_SCRAPE["tlsConfig"]
    assert endpoint["relabelConfigs"][0] == {"action": "replace", "targetLabel": "job",
                                             "replacement": EXPORTER_JOB}
    assert "relabelings" not in endpoint and "metricRelabelings" not in endpoint
    rule = one(docs, "VMRule")
    assert rule["metadata"]["labels"]["vmalert"] == "pulsar"
    assert rule["spec"] == one(docs, "PrometheusRule")["spec"]


def test_victoria_metrics_resources_stand_alone_and_follow_the_job():
    docs = render({"serviceMonitor": {"job": "pqe-prod"},
                   "prometheusRule": {"disabledAlerts": [alerts.alerts()[0].name]},
                   "victoriaMetrics": {"serviceScrape": {"enabled": True},
                                       "rule": {"enabled": True}}})
    kinds = {d["kind"] for d in docs}
    assert kinds & set(CRD_KINDS) == {"VMServiceScrape", "VMRule"}
    scrape = one(docs, "VMServiceScrape")
    assert scrape["spec"]["endpoints"][0]["relabelConfigs"][0]["replacement"] == "pqe-prod"
    rules = [r for g in one(docs, "VMRule")["spec"]["groups"] for r in g["rules"]]
    assert len(rules) == len(alerts.alerts()) - 1
    assert all('job="pqe-prod"' in r["expr"] and 'job="pulsar-quota-exporter"' not in r["expr"]
               for r in rules)


def test_no_victoria_metrics_resources_by_default():
    assert not {d["kind"] for d in render()} & set(CRD_KINDS)
