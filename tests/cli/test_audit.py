"""``gpushare audit`` and ``gpushare explain`` over the real CLI (snapshot and live), the report
objects against the vendored CRD schemas, and ``GET /explain`` plus the periodic audit's
metrics on the real server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests
import yaml

from tests.support.audit_cluster import CGPU_NODE, CONFIG, EXPECTED, PENDING, objects, write_snapshot
from tests.support.check_helpers import run_gpushare
from tests.support.crds import load_crd
from tests.support.fake_apiserver_writes import WritableApiServer
from tests.support.helpers import DATA, gpushare_server, wait_until

pytestmark = pytest.mark.processes

# Report CRDs as published upstream (unmodified third-party data; origin in tests/data/crds/ORIGIN.md).
CRDS = DATA / "crds"
CRD_FILES = {("openreports", True): "openreports.io_reports.yaml",
             ("openreports", False): "openreports.io_clusterreports.yaml",
             ("policyreport", True): "wgpolicyk8s.io_policyreports.yaml",
             ("policyreport", False): "wgpolicyk8s.io_clusterpolicyreports.yaml"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_snapshot(tmp_path_factory.mktemp("audit"))


@pytest.fixture(scope="module")
def apiserver() -> Any:
    api = WritableApiServer().start()
    api.install_crd(*(load_crd(name) for name in CRD_FILES.values()))  # a cluster serving both report APIs
    api.add(*objects())
    yield api
    api.stop()


@pytest.fixture(scope="module")
def kubeconfig(apiserver: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return apiserver.kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")


def _findings(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {(f["rule"], f"{f['object']['kind']} " + (f"{f['object']['namespace']}/{f['object']['name']}"
                                                      if f["object"]["namespace"] else f["object"]["name"]))
            for f in document["findings"]}


def _audit_json(*args: str | Path) -> tuple[int, dict[str, Any]]:
    done = run_gpushare("audit", "--format", "json", *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_snapshot_audit_reports_every_invariant_once(cluster: tuple[Path, Path]) -> None:
    snapshot, config = cluster
    code, document = _audit_json("--snapshot", snapshot, "--config", config)
    assert code == 1  # denials fail the run, as in check
    assert _findings(document) == EXPECTED
    messages = {f["rule"]: f["message"] for f in document["findings"]}
    assert "18 GiB of gpu-mem assigned on a 15 GiB card" in messages["GA001"]
    assert "21 pods on one card, the cGPU limit is 20" in messages["GA002"]
    assert "is recorded on GPU5, but node" in messages["GA005"] and "has 2 cards" in messages["GA005"]
    assert "ALIYUN_COM_GPU_MEM_ASSIGNED=false" in messages["GA006"]
    assert "schedulerName default-scheduler" in messages["GA007"]
    assert document["summary"]["objects"] == 4 + len(objects()) - 4  # every node and GPU pod judged


def test_audit_text_sarif_and_config(cluster: tuple[Path, Path], tmp_path: Path) -> None:
    snapshot, config = cluster
    text = run_gpushare("audit", "--snapshot", snapshot, "--config", config)
    assert text.returncode == 1
    assert f"{snapshot}: deny GA001: node" in text.stdout and text.stdout.rstrip().splitlines()[-1].startswith("FAIL:")
    sarif = run_gpushare("audit", "--snapshot", snapshot, "--config", config, "--format", "sarif")
    log = json.loads(sarif.stdout)
    jsonschema.validate(log, json.loads((DATA / "sarif-schema-2.1.0.json").read_text()))
    described = {r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert {"GA001", "GA007"} <= described
    assert {r["ruleId"] for r in log["runs"][0]["results"]} == {rule for rule, _ in EXPECTED}
    # Severities and switches come from the same config as check: warnings only, GA006 off.
    relaxed = tmp_path / "relaxed.yaml"
    relaxed.write_text(CONFIG + "rules:\n" + "".join(f"  {r}: {{severity: warn}}\n" for r in
                                                     ("GA001", "GA002", "GA003", "GA004", "GA005", "GS001"))
                       + "  GA006: {enabled: false}\n")
    code, document = _audit_json("--snapshot", snapshot, "--config", relaxed)
    assert code == 0 and "GA006" not in {f["rule"] for f in document["findings"]}
    strict = run_gpushare("audit", "--snapshot", snapshot, "--config", relaxed, "--fail-on", "warn")
    assert strict.returncode == 1


def test_bad_input_exits_2_with_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("items: [\n")
    done = run_gpushare("audit", "--snapshot", broken)
    assert done.returncode == 2 and str(broken) in done.stderr and "Traceback" not in done.stderr
    assert run_gpushare("audit", "--write-reports", "--snapshot", broken).returncode == 2


def _schema(crd_file: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / crd_file).read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] in ("v1alpha1", "v1alpha2")
                   and crd["spec"]["group"] in ("openreports.io", "wgpolicyk8s.io")
                   and (v["name"] == "v1alpha1") == (crd["spec"]["group"] == "openreports.io"))
    schema = dict(version["schema"]["openAPIV3Schema"])
    schema["additionalProperties"] = False  # nothing the CRD does not know (the API server would prune it)
    return schema


@pytest.mark.parametrize("kind", ["openreports", "policyreport"])
def test_report_objects_fit_the_crds_one_per_namespace(cluster: tuple[Path, Path], tmp_path: Path, kind: str) -> None:
    assert CRDS.is_dir(), f"the report CRDs are missing: {CRDS} (see ORIGIN.md there)"
    snapshot, config = cluster
    out = tmp_path / "reports.yaml"
    done = run_gpushare("audit", "--snapshot", snapshot, "--config", config, "--report-kind", kind,
                        "--reports-file", out)
    assert done.returncode == 1, done.stderr
    items = yaml.safe_load(out.read_text())["items"]
    namespaces = [i["metadata"].get("namespace", "") for i in items]
    assert namespaces == ["", "default"]  # the nodes' cluster report, then one per namespace with findings
    for item in items:
        jsonschema.validate(item, _schema(CRD_FILES[(kind, bool(item["metadata"].get("namespace")))]))
    pods = items[1]
    assert pods["summary"]["fail"] == 3 and pods["summary"]["warn"] == 2
    assert {r["policy"] for r in pods["results"]} == {"GA004", "GA005", "GA006", "GA007", "GS001"}


def test_report_objects_are_bounded(cluster: tuple[Path, Path], tmp_path: Path) -> None:
    snapshot, _ = cluster
    small = tmp_path / "small.yaml"
    small.write_text(CONFIG + "  max_results_per_report: 2\n")
    out = tmp_path / "reports.yaml"
    run_gpushare("audit", "--snapshot", snapshot, "--config", small, "--reports-file", out)
    pods = yaml.safe_load(out.read_text())["items"][1]
    assert len(pods["results"]) == 2 and pods["metadata"]["annotations"]["gpushare.io/results-left-out"] == "3"
    assert pods["summary"]["fail"] + pods["summary"]["warn"] == 5
    assert [r["result"] for r in pods["results"]] == ["fail", "fail"]  # denials kept first


def test_live_audit_agrees_with_the_snapshot_and_writes_reports(cluster: tuple[Path, Path], kubeconfig: Path,
                                                                apiserver: Any) -> None:
    _, config = cluster
    code, document = _audit_json("--kubeconfig", kubeconfig, "--config", config)
    assert code == 1 and _findings(document) == EXPECTED
    done = run_gpushare("audit", "--kubeconfig", kubeconfig, "--config", config, "--write-reports",
                        "--report-kind", "openreports")
    assert done.returncode == 1 and "wrote 2 Report object(s)" in done.stderr, done.stderr
    stored = apiserver.get("/apis/openreports.io/v1alpha1/namespaces/default/reports/gpushare-audit")
    assert stored is not None and stored["kind"] == "Report"
    stored.pop("metadata")  # the server's own fields (resourceVersion, uid...) are not ours to check
    jsonschema.validate({**stored, "metadata": {}}, _schema("openreports.io_reports.yaml"))
    cluster_report = apiserver.get("/apis/openreports.io/v1alpha1/clusterreports/gpushare-audit")
    assert cluster_report is not None and {r["policy"] for r in cluster_report["results"]} == {"GA001", "GA002",
                                                                                               "GA003"}
    # A second run replaces the objects instead of adding more.
    again = run_gpushare("audit", "--kubeconfig", kubeconfig, "--config", config, "--write-reports",
                         "--report-kind", "openreports")
    assert again.returncode == 1
    assert len([w for w in apiserver.writes if w.method == "POST" and w.resource == "reports"]) == 1
    assert any(w.method == "PUT" and w.resource == "reports" for w in apiserver.writes)
    assert apiserver.pruned == []  # every field written is one the CRD's schema names


def test_write_reports_says_when_the_cluster_serves_no_report_api(cluster: tuple[Path, Path], tmp_path: Path) -> None:
    _, config = cluster
    bare = WritableApiServer().start()  # no report CRD installed: their collections answer 404
    try:
        bare.add(*objects())
        kubeconfig = bare.kubeconfig(tmp_path / "kubeconfig")
        done = run_gpushare("audit", "--kubeconfig", kubeconfig, "--config", config, "--write-reports")
        assert done.returncode != 0 and "Traceback" not in done.stderr
        assert "the cluster serves neither openreports.io/v1alpha1 Reports nor wgpolicyk8s.io/v1alpha2 " \
               "PolicyReports; install one of the CRDs" in done.stderr
        named = run_gpushare("audit", "--kubeconfig", kubeconfig, "--config", config, "--write-reports",
                             "--report-kind", "policyreport")
        assert "the cluster does not serve wgpolicyk8s.io/v1alpha2 PolicyReports; install its CRD" in named.stderr
        assert bare.writes == []
    finally:
        bare.stop()


def _explain(*args: str | Path) -> dict[str, Any]:
    done = run_gpushare("explain", f"{PENDING[0]}/{PENDING[1]}", "-o", "json", *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_explain_names_every_node_the_closest_and_what_would_change(cluster: tuple[Path, Path],
                                                                    kubeconfig: Path) -> None:
    snapshot, _ = cluster
    explained = _explain("--snapshot", snapshot)
    assert explained["node"] is None and explained["fitting"] == []
    assert [entry["node"] for entry in explained["ranking"]] == sorted(n["metadata"]["name"] for n in objects()
                                                                        if n["kind"] == "Node")
    reasons = {entry["node"]: " ".join(entry["reasons"]) for entry in explained["ranking"]}
    assert "GB002" in reasons["cn-beijing.10.0.0.3"]  # mode
    assert "GB001" in reasons["cn-beijing.10.0.0.1"]  # mixing
    assert "GPU0 has 10/31 GiB free, needs 20" in reasons[CGPU_NODE]  # free memory per card
    assert explained["closest"] == CGPU_NODE
    assert explained["changes"] == [f"10 GiB more would have to be free on node {CGPU_NODE} GPU0 (10/31 GiB free; "
                                    f"held by batch/small-00, batch/small-01, batch/small-02 and 18 more), or "
                                    f'container "cuda" ask for at most 10 GiB']
    assert _explain("--kubeconfig", kubeconfig) == explained  # live and snapshot agree
    text = run_gpushare("explain", PENDING[1], "-n", PENDING[0], "--snapshot", snapshot)
    assert text.returncode == 0 and f"To fit on {CGPU_NODE}:" in text.stdout
    missing = run_gpushare("explain", "default/nope", "--snapshot", snapshot)
    assert missing.returncode == 2 and "no such pod" in missing.stderr


def test_server_explain_uses_dry_run_words_and_auth(cluster: tuple[Path, Path], tmp_path: Path) -> None:
    snapshot, _ = cluster
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    (tmp_path / ".gpushare.yaml").write_text(f"auth:\n  bearer_token_file: {token}\n")
    with gpushare_server(tmp_path, "--snapshot", str(snapshot)) as server:
        session = server.session()
        url = f"{server.url}/explain?namespace={PENDING[0]}&name={PENDING[1]}"
        assert session.get(url).status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        answer = session.get(url, headers=auth)
        assert answer.status_code == 200
        body = answer.json()
        assert {k: v for k, v in body.items() if k != "state"} == _explain("--snapshot", snapshot)
        # The same words as /dry-run for the same pod.
        pod = next(o for o in objects() if o["metadata"]["name"] == PENDING[1])
        dry = session.post(f"{server.url}/dry-run", data=yaml.safe_dump(pod), headers=auth).json()
        assert [(e["node"], e["reasons"]) for e in dry["results"][0]["ranking"]] == [
            (e["node"], e["reasons"]) for e in body["ranking"]]
        bad = session.get(f"{server.url}/explain?namespace=default", headers=auth)
        assert bad.status_code == 400 and "namespace=NS&name=NAME" in bad.json()["error"]["reason"]
        gone = session.get(f"{server.url}/explain?namespace=default&name=nope", headers=auth)
        assert gone.status_code == 404
        assert session.post(f"{server.url}/validate", data="{}").status_code != 401  # admission paths stay open
        # A snapshot does not change: the server does not audit it periodically.
        assert "gpushare_audit_findings" not in session.get(f"{server.url}/metrics").text


def test_server_audits_the_live_state_periodically(cluster: tuple[Path, Path], kubeconfig: Path,
                                                   tmp_path: Path) -> None:
    (tmp_path / ".gpushare.yaml").write_text(CONFIG + "  interval_seconds: 1\n")
    with gpushare_server(tmp_path, "--kubeconfig", str(kubeconfig), ready_path="/readyz") as server:
        def scraped() -> str | None:
            text = requests.get(f"{server.url}/metrics", verify=server.ca, timeout=5).text
            return text if "gpushare_audit_last_run_timestamp_seconds" in text else None

        text = wait_until(scraped, timeout=30, what="a periodic audit in /metrics")
        for rule, _ in EXPECTED:
            severity = "warn" if rule in ("GA006", "GA007") else "deny"
            assert f'gpushare_audit_findings{{rule="{rule}",severity="{severity}"}} 1.0' in text, rule

