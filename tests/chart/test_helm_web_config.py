"""The chart's `webConfig`: the exporter-toolkit web config file rendered into a Secret (or an
existing Secret), mounted, and passed with `--web.config.file`; the probes, the Service and
the ServiceMonitor follow what it asks of clients. Rendered by Helm itself (test_helm_chart.py's
helpers); the rendered file is read by the exporter's own parser."""

from __future__ import annotations

import os

import bcrypt
import helm_python as helm
import kubernetes_validate
import pytest

from exporter import cli
from exporter.server.toolkit import load_file
from tests.chart.test_helm_chart import CHART, KUBE_VERSIONS, container, one, render

pytestmark = pytest.mark.tools
HASH = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
INLINE = {"webConfig": {"config": {
    "basic_auth_users": {"prometheus": HASH},
    "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
    "rate_limit": {"interval": "100ms", "burst": 20}}}}


def pod(docs):
    return one(docs, "Deployment")["spec"]["template"]["spec"]


def test_inline_file_is_a_secret_mounted_where_the_flag_points(tmp_path):
    docs = render(INLINE)
    secret = one(docs, "Secret", "-web-config")
    c = container(docs)
    args = cli._parser().parse_args(c["args"])  # the real CLI accepts the flag
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod(docs)["volumes"]}
    assert os.path.dirname(args.web_config) == mounts["web-config"]
    assert volumes["web-config"]["secret"]["secretName"] == secret["metadata"]["name"]
    (item,) = volumes["web-config"]["secret"]["items"]
    assert item["path"] == os.path.basename(args.web_config)
    # The rendered file is one the exporter accepts, with what was given.
    path = tmp_path / item["path"]
    path.write_text(secret["stringData"][item["key"]])
    web = load_file(str(path))
    assert web.auth is not None and dict(web.headers) == {"X-Frame-Options": "deny"}
    assert web.limiter is not None and web.limiter.limit.burst == 20
    # Basic auth covers the probes' paths: the chart probes the port instead.
    assert c["livenessProbe"]["tcpSocket"] == {"port": "http-metrics"}


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_rendered_manifests_validate(kube):
    for values in (INLINE, {"webConfig": {"existingSecret": "mine", "tls": True}}):
        for doc in render(values):
            if doc["kind"] not in ("ServiceMonitor", "PrometheusRule"):
                kubernetes_validate.validate(doc, kube, strict=True)


def test_tls_in_the_file_makes_the_scheme_https():
    tls = {"cert_file": "/certs/tls.crt", "key_file": "/certs/tls.key"}
    docs = render({"webConfig": {"config": {"tls_server_config": tls}},
                   "serviceMonitor": {"enabled": True}})
    c = container(docs)
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"  # no credentials asked
    assert one(docs, "Service")["spec"]["ports"][0]["appProtocol"] == "https"
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["scheme"] == "https"
    mtls = {**tls, "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": "/c/ca"}
    c = container(render({"webConfig": {"config": {"tls_server_config": mtls}}}))
    assert c["readinessProbe"]["tcpSocket"] == {"port": "http-metrics"}


def test_an_existing_secret_is_mounted_and_no_secret_rendered():
    docs = render({"webConfig": {"existingSecret": "exporter-web", "key": "web.yml",
                                 "tls": True}})
    assert not [d for d in docs if d["kind"] == "Secret"]
    volumes = {v["name"]: v for v in pod(docs)["volumes"]}
    assert volumes["web-config"]["secret"]["secretName"] == "exporter-web"
    args = cli._parser().parse_args(container(docs)["args"])
    assert args.web_config == "/etc/pulsar-quota-exporter-web/web.yml"
    assert one(docs, "Service")["spec"]["ports"][0]["appProtocol"] == "https"
    assert container(docs)["livenessProbe"]["tcpSocket"] == {"port": "http-metrics"}


def test_without_web_config_nothing_changes():
    docs = render()
    assert "web-config" not in {v["name"] for v in pod(docs)["volumes"]}
    assert cli._parser().parse_args(container(docs)["args"]).web_config is None


@pytest.mark.parametrize(("values", "match"), [
    ({**INLINE, "config": {"exposition": {"basic_auth": {"prometheus": HASH}}}},
     "webConfig and config.exposition.tls/basic_auth are both set"),
    ({"webConfig": {"existingSecret": "x", "config": {"rate_limit": {"burst": 1}}}},
     "webConfig.existingSecret and webConfig.config are both set"),
    ({"webConfig": {"config": {}, "unknown": 1}}, "unknown"),
])
def test_conflicting_values_fail_the_render(values, match):
    refused = (helm.HelmRenderError, helm.HelmValuesError)
    with helm.Chart.load(CHART) as chart, pytest.raises(refused, match=match):
        chart.render(values, name="rel", namespace="pulsar")
