"""The Grafana dashboard, the alerts and the ServiceMonitor: every PromQL expression parses (Prometheus'
grammar, promql-parser) and names only series the real server exposes or Prometheus makes itself; the
Helm chart and the kustomize components render the same objects, valid against the Kubernetes and
prometheus-operator schemas."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from typing import Any

import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.test_deploy import CHART, KUSTOMIZE, ROOT, key, render_helm, render_with_components
from tests.support.helpers import DATA, admission_review, gpushare_server, wait_until
from tests.support.manifests import CORE, MEM, container, pod_spec, workload

pytestmark = pytest.mark.processes

COMPONENTS = KUSTOMIZE / "components"
DASHBOARDS = (COMPONENTS / "grafana-dashboard" / "gpushare-webhook.json",
              CHART / "dashboards" / "gpushare-webhook.json")
# Series Prometheus makes itself for every target.
PROMETHEUS_OWN = {"up"}
# Grafana's variables, as Grafana substitutes them before sending a query.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$job": "gpushare-webhook"}
# prometheus-operator's CRDs (unmodified third-party data; origin in tests/data/crds/ORIGIN.md).
CRDS = DATA / "crds"
MONITORING = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
              "grafanaDashboard": {"enabled": True}}
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def exposed(tmp_path_factory) -> set[str]:
    """Sample names on the real server's /metrics, per-card series switched on."""
    env = {"GPUSHARE_METRICS__PER_CARD": "all", "GPUSHARE_METRICS__REFRESH_SECONDS": "0.2"}
    with gpushare_server(tmp_path_factory.mktemp("monitoring"), env=env) as server, server.session() as session:
        # An invalid review and a denied one, so the labelled request and denial series exist.
        server.post_json("/validate", {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, session)
        job = workload("Job", pod_spec(container("c", limits={MEM: 2, CORE: 33})), name="cuda-33")
        denied = server.post_json("/validate", admission_review(job, group="batch"), session).json()
        assert denied["response"]["allowed"] is False
        def scraped() -> str | None:
            text = session.get(server.url + "/metrics", timeout=10).text
            return text if "gpushare_gpu_memory_total_gib{" in text else None

        text = wait_until(scraped, what="the allocation series")
        found = {s.name: s for family in text_string_to_metric_families(text) for s in family.samples}
        # Certificate expiry is the files' notAfter.
        for role, name in (("serving", "tls.crt"), ("ca", "ca.crt")):
            cert = x509.load_pem_x509_certificate((server.cert_dir / name).read_bytes())
            value = next(s.value for family in text_string_to_metric_families(text) for s in family.samples
                         if s.name == "gpushare_certificate_not_after_timestamp_seconds"
                         and s.labels == {"certificate": role})
            assert value == cert.not_valid_after_utc.timestamp()
        assert found["gpushare_state_usable"].value == 1
    return set(found)


def selectors(expr: Any) -> list[str]:
    """Metric names of every vector selector in a parsed PromQL expression."""
    if isinstance(expr, promql_parser.VectorSelector):
        return [expr.name]
    if isinstance(expr, promql_parser.MatrixSelector):
        return selectors(expr.vector_selector)
    if isinstance(expr, promql_parser.BinaryExpr):
        return selectors(expr.lhs) + selectors(expr.rhs)
    if isinstance(expr, promql_parser.AggregateExpr):
        return selectors(expr.expr) + (selectors(expr.param) if expr.param is not None else [])
    if isinstance(expr, promql_parser.Call):
        return [name for arg in expr.args for name in selectors(arg)]
    if isinstance(expr, promql_parser.ParenExpr | promql_parser.UnaryExpr | promql_parser.SubqueryExpr):
        return selectors(expr.expr)
    return []


def dashboard_queries() -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARDS[0].read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            queries.append((f"dashboard panel {panel['title']!r} {target['refId']}", expr))
    return queries


def rule_queries(objects: list[Obj]) -> list[tuple[str, str]]:
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    return [(f"alert {r['alert']}", str(r["expr"])) for group in rule["spec"]["groups"] for r in group["rules"]]


@pytest.fixture(scope="module")
def overlay(tmp_path_factory) -> list[Obj]:
    """The base with the three monitoring components, as a user's overlay includes them."""
    components = ("grafana-dashboard", "prometheus-rules", "service-monitor")
    return render_with_components(tmp_path_factory.mktemp("overlay"), *(COMPONENTS / c for c in components))


@pytest.fixture(scope="module")
def helm_monitoring() -> list[Obj]:
    return render_helm({"namespace": {"create": True}, **MONITORING})


def test_every_query_parses_and_names_only_exposed_series(exposed, overlay, helm_monitoring):
    queries = dashboard_queries() + rule_queries(overlay) + rule_queries(helm_monitoring)
    assert len(queries) >= 20
    for where, expr in queries:
        try:
            parsed = promql_parser.parse(expr)
        except Exception as exc:  # the parser's own error type carries Prometheus' message
            pytest.fail(f"{where}: {expr!r} does not parse: {exc}")
        names = selectors(parsed)
        assert names, f"{where}: no series named in {expr!r}"
        unknown = [n for n in names if n not in exposed | PROMETHEUS_OWN]
        assert not unknown, f"{where}: {unknown} are not on the server's /metrics"


def test_dashboard_has_the_promised_panels_and_one_copy_per_installer():
    assert DASHBOARDS[0].read_bytes() == DASHBOARDS[1].read_bytes(), "the chart's dashboard copy drifted"
    dashboard = json.loads(DASHBOARDS[0].read_text())
    titles = {p["title"] for p in dashboard["panels"] if p["type"] != "row"}
    assert {"Admission reviews by outcome", "Review latency p50 / p99", "Denials by rule",
            "Requests refused (HTTP errors)", "State staleness", "Certificate days left",
            "Cluster GPU memory assigned / total", "GPU memory assigned per card (node x card)"} <= titles
    heatmap = next(p for p in dashboard["panels"] if p["title"].startswith("GPU memory assigned per card"))
    assert heatmap["transformations"][0]["options"] | {"rowField": "node", "columnField": "card"} == \
        heatmap["transformations"][0]["options"]
    # The README shows the same panels.
    readme = (ROOT / "docs" / "metrics.md").read_text()
    assert all(f"**{title}**" in readme for title in titles), "docs/metrics.md lists every panel"


def strict(schema: Obj) -> Obj:
    """A CRD schema as kubectl's strict field validation applies it: unknown fields fail."""
    schema = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


def crd_schema(kind: str) -> Obj:
    for path in CRDS.glob("monitoring.coreos.com_*.yaml"):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] == kind:
            (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
            return strict(version["schema"]["openAPIV3Schema"])
    raise AssertionError(f"no CRD for {kind} in {CRDS}")


@pytest.mark.parametrize("installer", ["kustomize", "helm"])
def test_monitoring_objects_are_valid(installer, overlay, helm_monitoring):
    objects = overlay if installer == "kustomize" else helm_monitoring
    kinds = {o["kind"] for o in objects}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds
    for obj in objects:
        if obj["kind"] in ("ServiceMonitor", "PrometheusRule"):
            try:
                # Not jsonschema.validate: it checks the schema's patterns as Python regexes, and the
                # CRD's Go (RE2) pattern '^(?i)(abort|warn)?$' is not one (the field is unused here).
                jsonschema.Draft202012Validator(crd_schema(obj["kind"])).validate(obj)
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{key(obj)} invalid against its CRD: {exc.message} at {list(exc.path)}")
        else:
            kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    dashboard = next(o for o in objects if o["metadata"]["name"] == "gpushare-webhook-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["gpushare-webhook.json"]) == json.loads(DASHBOARDS[0].read_text())


def test_helm_and_kustomize_render_the_same_monitoring_objects(overlay, helm_monitoring):
    def monitoring(objects: list[Obj]) -> dict:
        return {key(o): o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component")
                == "monitoring"}

    helm, kustomized = monitoring(helm_monitoring), monitoring(overlay)
    assert set(helm) == set(kustomized) == {("ConfigMap", "gpushare-system", "gpushare-webhook-dashboard"),
                                            ("PrometheusRule", "gpushare-system", "gpushare-webhook"),
                                            ("ServiceMonitor", "gpushare-system", "gpushare-webhook")}
    for k, obj in kustomized.items():
        assert helm[k] == obj, f"{k} differs between kustomize and helm"
    # The ServiceMonitor scrapes the webhook's Service, whose name is the job the queries select.
    monitor = kustomized[("ServiceMonitor", "gpushare-system", "gpushare-webhook")]
    service = next(o for o in overlay if o["kind"] == "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    # ...on its ops port (the admission port does not serve /metrics), with the token the server reads.
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "ops" and "ops" in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["authorization"] == {"type": "Bearer",
                                         "credentials": {"name": "gpushare-webhook-token", "key": "token"}}
    deployment = next(o for o in overlay if o["kind"] == "Deployment")
    token = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "token")
    assert token["secret"]["secretName"] == endpoint["authorization"]["credentials"]["name"]
    assert service["metadata"]["name"] == GRAFANA_VARIABLES["$job"]


def test_helm_values_for_monitoring():
    objects = render_helm({**MONITORING, "prometheusRule": {"enabled": True, "certificateDaysLeft": 30,
                                                            "labels": {"release": "kps"}},
                           "grafanaDashboard": {"enabled": True, "namespace": "monitoring", "label": "dash",
                                                "labelValue": "yes"}}, namespace="gpu")
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    expiring = next(r for g in rule["spec"]["groups"] for r in g["rules"]
                    if r["alert"] == "GpushareCertificateExpiring")
    assert expiring["expr"].endswith("< 30 * 86400")
    dashboard = next(o for o in objects if o["kind"] == "ConfigMap" and "dashboard" in o["metadata"]["name"])
    assert dashboard["metadata"]["namespace"] == "monitoring" and dashboard["metadata"]["labels"]["dash"] == "yes"
    # Off by default: a cluster without prometheus-operator gets none of these kinds.
    assert not {"ServiceMonitor", "PrometheusRule"} & {o["kind"] for o in render_helm({})}


def test_certificate_days_are_what_the_alert_reads(tmp_path):
    from certs.issue import ensure_serving_certs
    from webhook.http.cert_metrics import CertificateCollector

    ensure_serving_certs(tmp_path, ["localhost"], ca_days=20, cert_days=5)
    (family,) = CertificateCollector(tmp_path).collect()
    days = {s.labels["certificate"]: (s.value - datetime.now().timestamp()) / 86400 for s in family.samples}
    assert 4.9 < days["serving"] <= 5 and 19.9 < days["ca"] <= 20
