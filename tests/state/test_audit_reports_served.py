"""The server's leader writes the audit's report objects, over real `gpushare serve --kubeconfig`
replicas and the fake API server serving the vendored report CRDs (what a CRD's schema does not
name is pruned, what breaks it is refused: tests/support/crds.py).

Exactly the leader writes (every write carries the writing replica's identity in its User-Agent),
a follower audits and writes nothing, stale objects go, the API is whichever the cluster serves,
and the writes use only the verbs deploy/ grants."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.state.test_leader import NS, holder, kill, labelled, replica_pod
from tests.support.audit_cluster import CONFIG, objects
from tests.support.cluster_objects import gpu_pod
from tests.support.crds import invalid, load_crd, report_resources
from tests.support.fake_apiserver import FakeApiServer, Request
from tests.support.fake_apiserver_writes import WritableApiServer
from tests.support.helpers import gpushare_server, wait_until

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
REPORT_GROUPS = ("/apis/openreports.io/", "/apis/wgpolicyk8s.io/")
WRITES = ("POST", "PUT", "PATCH", "DELETE")
FAST = {"GPUSHARE_LEADER__NAMESPACE": NS, "GPUSHARE_LEADER__LEASE_DURATION_SECONDS": "2",
        "GPUSHARE_LEADER__RENEW_DEADLINE_SECONDS": "1.5", "GPUSHARE_LEADER__RETRY_PERIOD_SECONDS": "0.25"}
REPORT = "/apis/openreports.io/v1alpha1/namespaces/{}/reports/gpushare-audit"
CLUSTER_REPORT = "/apis/openreports.io/v1alpha1/clusterreports/gpushare-audit"


@pytest.fixture
def api() -> Iterator[WritableApiServer]:
    server = WritableApiServer().start()
    yield server
    server.stop()


def report_requests(api: FakeApiServer, methods: tuple[str, ...] = ("GET", *WRITES)) -> list[Request]:
    return [r for r in list(api.requests) if r.path.startswith(REPORT_GROUPS) and r.method in methods]


def metric(server: Any, name: str) -> float:
    text = server.session().get(server.url + "/metrics", timeout=5).text
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found[1]) if found else -1.0


def start(api: FakeApiServer, tmp_path: Path, stack: ExitStack, names: tuple[str, ...], config: str = "",
          env: dict[str, str] | None = None) -> dict[str, Any]:
    kubeconfig = str(api.kubeconfig(tmp_path / "kc"))
    servers = {}
    for name in names:
        workdir = tmp_path / name
        workdir.mkdir()
        (workdir / ".gpushare.yaml").write_text(CONFIG + "  interval_seconds: 0.5\n" + config)
        servers[name] = stack.enter_context(gpushare_server(
            workdir, "--kubeconfig", kubeconfig, ready_path="/readyz",
            env={**FAST, "GPUSHARE_LEADER__POD_NAME": name, **(env or {})}))
    return servers


def verbs_granted() -> set[tuple[str, str, str]]:
    """(group, resource, verb) the webhook's report ClusterRole grants in deploy/kustomize."""
    rbac = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kustomize" / "rbac.yaml").read_text()) if d]
    role = next(d for d in rbac if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "gpushare-webhook-reports")
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def verb_of(request: Request) -> tuple[str, str, str]:
    """What RBAC calls a request (kube-apiserver's request info: a GET of a collection is list)."""
    parts = [p for p in request.path.split("/") if p]
    group, rest = parts[1], parts[3:]
    if rest[:1] == ["namespaces"]:
        rest = rest[2:]
    named = len(rest) > 1
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(request.method)
    if verb is None:
        verb = "watch" if request.query.get("watch") == "true" else ("get" if named else "list")
    return group, rest[0], verb


def test_the_leader_alone_writes_reports_and_deletes_its_stale_ones(api, tmp_path):
    api.install_crd(*(load_crd(f) for f in ("openreports.io_reports.yaml", "openreports.io_clusterreports.yaml")))
    # One more namespace with a finding (GS001: 33 % compute), to be cleaned up later.
    odd = gpu_pod("odd-33", mem=1, core=33, node_name="cn-beijing.10.0.0.1", namespace="ml")
    api.add(replica_pod("replica-a"), replica_pod("replica-b"), *objects(), odd)
    report, cluster_report = report_resources("openreports")
    with ExitStack() as stack:
        servers = start(api, tmp_path, stack, ("replica-a", "replica-b"))
        first = wait_until(lambda: len(labelled(api)) == 1 and labelled(api)[0], timeout=30, what="a leader")
        follower = next(name for name in servers if name != first)
        written = wait_until(lambda: all(api.get(p) for p in (REPORT.format("default"), REPORT.format("ml"),
                                                              CLUSTER_REPORT)) and api.get(REPORT.format("default")),
                             timeout=30, what="the leader's report objects")
        # The follower audits the same state, and writes nothing.
        wait_until(lambda: metric(servers[follower], "gpushare_audit_runs_total") >= 2, timeout=30,
                   what="two audits on the follower")
        assert metric(servers[follower], "gpushare_audit_reports_written") == 0.0
        assert metric(servers[first], "gpushare_audit_reports_written") == 3.0
        identity = holder(api)
        assert identity.startswith(first + "_")
        writes = report_requests(api, WRITES)
        assert writes and all(f"; {identity})" in r.user_agent for r in writes), {r.user_agent for r in writes}
        assert not any(follower in r.user_agent for r in report_requests(api))  # not even a read

        # What is stored fits the CRDs as published: nothing pruned, nothing refused.
        assert api.pruned == []
        for path, crd in ((REPORT.format("default"), report), (CLUSTER_REPORT, cluster_report)):
            stored = api.get(path)
            assert invalid(stored, crd.schema) is None
            assert stored["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpushare"
        assert {r["policy"] for r in written["results"]} == {"GA004", "GA005", "GA006", "GA007", "GS001"}
        assert written["summary"] == {"pass": 0, "fail": 3, "warn": 2, "error": 0, "skip": 0}

        # The finding in "ml" goes away: so does that namespace's report, and only that one.
        api.delete(odd)
        wait_until(lambda: api.get(REPORT.format("ml")) is None, timeout=30, what="the stale report to be deleted")
        assert api.get(REPORT.format("default")) is not None and api.get(CLUSTER_REPORT) is not None

        # The leader dies: the next one writes, under its own name.
        kill(servers[first])
        wait_until(lambda: labelled(api) == [follower], timeout=20, what="the follower to lead")
        successor = holder(api)
        before = len(report_requests(api, WRITES))
        wait_until(lambda: any(f"; {successor})" in r.user_agent for r in report_requests(api, WRITES)[before:]),
                   timeout=30, what="the new leader's writes")
        wait_until(lambda: metric(servers[follower], "gpushare_audit_reports_written") == 2.0, timeout=30,
                   what="the new leader to count its writes (two: the cluster's and default's; ml is gone)")

        # Every request the replicas made to the report APIs is one deploy/ grants, and no more.
        used = {verb_of(r) for r in report_requests(api)}
        assert used <= verbs_granted(), used - verbs_granted()
        assert {"list", "create", "update", "delete"} <= {verb for _, _, verb in used}


@pytest.mark.parametrize("served", ["policyreport", "both", "neither"])
def test_the_report_api_is_whichever_the_cluster_serves(api, tmp_path, served):
    if served in ("policyreport", "both"):
        api.install_crd(*(load_crd(f) for f in ("wgpolicyk8s.io_policyreports.yaml",
                                                "wgpolicyk8s.io_clusterpolicyreports.yaml")))
    if served == "both":
        api.install_crd(*(load_crd(f) for f in ("openreports.io_reports.yaml", "openreports.io_clusterreports.yaml")))
        # Left by a run from before OpenReports was installed: the leader removes its own stale kind.
        api.add({"apiVersion": "wgpolicyk8s.io/v1alpha2", "kind": "PolicyReport", "metadata": {
            "name": "gpushare-audit", "namespace": "default", "labels": {"app.kubernetes.io/managed-by": "gpushare"}},
            "results": []}, resource="policyreports")
    api.add(replica_pod("replica-a"), *objects())
    policy_report = "/apis/wgpolicyk8s.io/v1alpha2/namespaces/default/policyreports/gpushare-audit"
    with ExitStack() as stack:
        server = start(api, tmp_path, stack, ("replica-a",))["replica-a"]
        wait_until(lambda: metric(server, "gpushare_audit_runs_total") >= 2, timeout=30, what="two audits")
        if served == "policyreport":
            stored = wait_until(lambda: api.get(policy_report), timeout=30, what="the PolicyReport")
            assert stored["kind"] == "PolicyReport"
            assert invalid(stored, report_resources("policyreport")[0].schema) is None
            # The only field pruned: results[].source, which this (earlier) v1alpha2 copy of the CRD
            # lacks and later v1alpha2 copies have (tests/data/crds/ORIGIN.md).
            assert {re.sub(r"\[\d+\]", "[]", p.split(": ", 1)[1]) for p in api.pruned} == {"results[].source"}
        elif served == "both":
            wait_until(lambda: api.get(REPORT.format("default")) and api.get(policy_report) is None, timeout=30,
                       what="OpenReports written and the stale PolicyReport deleted")
            assert api.pruned == []
        else:
            assert report_requests(api, WRITES) == []
            assert metric(server, "gpushare_audit_report_failures_total") == 0.0  # nothing to write to: no error
            assert "audit:" in server.log() and "no report API served" in server.log()


def test_reports_none_asks_nothing(api, tmp_path):
    api.install_crd(*(load_crd(f) for f in ("openreports.io_reports.yaml", "openreports.io_clusterreports.yaml")))
    api.add(replica_pod("replica-a"), *objects())
    with ExitStack() as stack:
        server = start(api, tmp_path, stack, ("replica-a",), env={"GPUSHARE_AUDIT__REPORTS": "none"})["replica-a"]
        wait_until(lambda: metric(server, "gpushare_audit_runs_total") >= 2, timeout=30, what="two audits")
        assert metric(server, "gpushare_audit_findings{rule=\"GA001\",severity=\"deny\"}") == 1.0
        assert report_requests(api) == []
        # Every audit metric is documented where the audit is.
        text = server.session().get(server.url + "/metrics", timeout=5).text
        names = {f.name for f in text_string_to_metric_families(text) if f.name.startswith("gpushare_audit_")}
        docs = (ROOT / "docs" / "audit.md").read_text()
        assert len(names) >= 9 and [n for n in sorted(names) if f"`{n}" not in docs] == []


def test_without_leader_election_the_one_replica_writes_and_a_refusal_is_counted_not_fatal(api, tmp_path):
    api.install_crd(*(load_crd(f) for f in ("openreports.io_reports.yaml", "openreports.io_clusterreports.yaml")))
    api.add(*objects())
    api.fail_next(2, 403, prefix="/apis/openreports.io/")  # RBAC not granted yet, say
    with ExitStack() as stack:
        server = start(api, tmp_path, stack, ("replica-a",), env={"GPUSHARE_LEADER__ENABLED": "false"})["replica-a"]
        wait_until(lambda: api.get(REPORT.format("default")), timeout=30, what="reports once the refusals end")
        assert metric(server, "gpushare_audit_report_failures_total") >= 1.0
        assert "cannot write report objects: openreports.io/v1alpha1 reports: 403 Forbidden" in server.log()
        assert metric(server, "gpushare_audit_failures_total") == 0.0  # the audit itself went fine
