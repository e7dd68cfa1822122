"""Admin-granted exemptions over the real server and CLI: the live Namespace watch allows
annotation exemptions where a label says so (and stops when it is removed), a config grant
exempts without any annotation, every honoured exemption shows in auditAnnotations, the
request log and /metrics, and ``gpushare check`` with the same config and namespace labels
reaches the same verdicts."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.check_helpers import check_json, run_gpushare, write_yaml
from tests.support.cluster_objects import node
from tests.support.fake_apiserver import FakeApiServer
from tests.support.helpers import admission_review, gpushare_server, wait_until
from tests.support.manifests import MEM, container, pod_spec, workload

pytestmark = pytest.mark.processes

LABEL = "gpushare.io/exemptions"
ANNOTATED = {"gpushare.io/exempt": "GS003", "gpushare.io/exempt-reason": "vendor image reads bytes"}
CONFIG = {"exemptions": {"grants": [{"name": "legacy-bytes", "namespace": "team-b", "names": "legacy-*",
                                     "rules": ["GS003"], "reason": "replaced in Q3", "expires": "2999-12-31"},
                                    {"name": "old-grant", "namespace": "team-b", "names": "old-*",
                                     "rules": ["GS003"], "reason": "was fine once", "expires": "2001-01-31"}]},
          "names": {"scheduler_name": "ack-co-scheduler"}}


def namespace(name: str, labels: dict[str, str] | None = None, rv: str = "1") -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": f"ns-{name}", "resourceVersion": rv, "labels": labels or {}}}


def bad_pod(name: str, ns: str, annotations: dict | None = None) -> dict:
    pod = workload("Pod", pod_spec(container("c", limits={MEM: "2Gi"})), name=name, namespace=ns)
    if annotations:
        pod["metadata"]["annotations"] = dict(annotations)
    return pod


def _objects() -> list[dict]:
    return [bad_pod("annotated", "team-a", ANNOTATED), bad_pod("annotated", "team-b", ANNOTATED),
            bad_pod("legacy-1", "team-b"), bad_pod("old-1", "team-b"), bad_pod("plain", "team-a")]


EXPECTED = {  # (namespace, name) -> (allowed, exempted_by)
    ("team-a", "annotated"): (True, "annotation"),   # the namespace is labelled
    ("team-b", "annotated"): (False, None),          # not labelled: GE001 says so
    ("team-b", "legacy-1"): (True, "grant:legacy-bytes"),
    ("team-b", "old-1"): (False, None),              # expired grant: GE001 says so
    ("team-a", "plain"): (False, None),
}


def _metric(text: str, name: str) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_live_namespace_labels_grants_audit_log_metrics_and_check_agree(tmp_path):
    api = FakeApiServer().start()
    try:
        api.add(namespace("team-a", {LABEL: "allowed"}), namespace("team-b"))
        config = write_yaml(tmp_path / "config.yaml", CONFIG)
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        with gpushare_server(tmp_path, "--kubeconfig", str(kubeconfig), "--config", str(config),
                             ready_path="/readyz") as server:
            session = server.session()
            answers = {}
            for obj in _objects():
                key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                response = server.post_json("/validate", admission_review(obj), session).json()["response"]
                answers[key] = response
                audit = response["auditAnnotations"]
                assert (response["allowed"], audit.get("exempted_by")) == EXPECTED[key], key
            reasons = {key: a["auditAnnotations"].get("exemption_reason") for key, a in answers.items()}
            assert reasons[("team-a", "annotated")] == "vendor image reads bytes"
            assert reasons[("team-b", "legacy-1")] == "replaced in Q3"
            assert "namespace team-b does not allow exemptions" in answers[("team-b", "annotated")]["warnings"][0]
            assert "'old-grant' (GS003) expired on 2001-01-31" in answers[("team-b", "old-1")]["warnings"][0]

            metrics = _metric(session.get(server.url + "/metrics", timeout=10).text, "gpushare_exemptions_total")
            assert metrics == {(("namespace", "team-a"), ("rule", "GS003")): 1.0,
                               (("namespace", "team-b"), ("rule", "GS003")): 1.0}

            def exempt_lines() -> list[dict]:
                lines = [json.loads(ln) for ln in server.log().splitlines() if ln.startswith("{")]
                return [ln for ln in lines if ln.get("exempted")]

            lines = wait_until(lambda: len(exempt_lines()) == 2 and exempt_lines(), timeout=10, what="log lines")
            assert {(ln["object"], ",".join(ln["exempted"]), ",".join(ln["exempted_by"])) for ln in lines} == {
                ("team-a/annotated", "GS003", "annotation"), ("team-b/legacy-1", "GS003", "grant:legacy-bytes")}

            # The admin removes the label: the watch shows it, and the annotation stops counting.
            api.add(namespace("team-a", {}, rv="2"))
            obj = bad_pod("annotated", "team-a", ANNOTATED)
            wait_until(lambda: not server.post_json("/validate", admission_review(obj), session).json()
                       ["response"]["allowed"], timeout=10, what="the label removal to take effect")
    finally:
        api.stop()

    # gpushare check with the same config and the namespaces' labels reaches the same verdicts.
    manifests = write_yaml(tmp_path / "pods.yaml", *_objects())
    labels = write_yaml(tmp_path / "namespaces.yaml", {"apiVersion": "v1", "kind": "List", "items": [
        namespace("team-a", {LABEL: "allowed"}), namespace("team-b")]})
    code, report = check_json("--config", config, "--namespace-labels", labels, manifests)
    assert code == 1
    for (ns, name), (allowed, by) in EXPECTED.items():
        denied = [f for f in report["findings"] if f["object"]["name"] == name and f["object"]["namespace"] == ns
                  and f["severity"] == "deny"]
        exempted = [f for f in report["exempted"] if f["object"]["name"] == name and f["object"]["namespace"] == ns]
        assert (not denied, bool(exempted)) == (allowed, by is not None), (ns, name)
    [granted] = [f for f in report["exempted"] if f["object"]["name"] == "legacy-1"]
    assert granted["exemptionReason"] == "replaced in Q3 [grant:legacy-bytes]"
    # A mapping works as well, and a snapshot's Namespaces are read when no labels file is given.
    mapping = write_yaml(tmp_path / "labels.yaml", {"team-a": {LABEL: "allowed"}, "team-b": {}})
    assert check_json("--config", config, "--namespace-labels", mapping, manifests)[1]["exempted"] == report["exempted"]
    snapshot = write_yaml(tmp_path / "snapshot.yaml", node(), namespace("team-a", {LABEL: "allowed"}),
                          namespace("team-b"))
    assert check_json("--config", config, "--snapshot", snapshot, manifests)[1]["exempted"] == report["exempted"]


def test_check_without_namespace_labels_honours_no_annotation_and_a_bad_labels_file_exits_2(tmp_path):
    manifests = write_yaml(tmp_path / "pods.yaml", bad_pod("annotated", "team-a", ANNOTATED))
    code, report = check_json(manifests)
    assert code == 1 and report["exempted"] == []
    assert re.search(r"labels of namespace team-a are not known", report["findings"][0]["message"])
    bad = tmp_path / "bad.yaml"
    for text in ("team-a: allowed\n", "- just\n- a list\n", "team-a: {a: [\n"):
        bad.write_text(text)
        done = run_gpushare("check", "--namespace-labels", bad, manifests)
        assert done.returncode == 2 and str(bad) in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
