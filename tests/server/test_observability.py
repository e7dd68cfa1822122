"""Metrics, request logs and audit annotations of the real server."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.helpers import admission_review, gpushare_server, load_json, wait_until
from tests.support.manifests import CORE, MEM, container, pod_spec, workload

# Metrics and logs with either gunicorn worker (server.worker).
pytestmark = [pytest.mark.both_workers, pytest.mark.processes]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"



def samples(server, session) -> dict[tuple[str, frozenset], float]:
    reply = session.get(server.url + "/metrics", timeout=10)
    assert reply.status_code == 200 and reply.headers["Content-Type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(reply.text) for s in family.samples}


def value(found: dict, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def _reviews():
    denied_and_warned = workload("Job", pod_spec(container("c", limits={MEM: 2, CORE: 33}),
                                                 container("d", limits={MEM: 1, CORE: 10},
                                                           requests={MEM: 2, CORE: 10})), name="mixed")
    return {
        "patched": ("/mutate", admission_review(load_json("pod-realistic.json"))),
        "denied": ("/validate", admission_review(denied_and_warned, group="batch")),
    }


def test_requests_rules_and_patches_are_counted(server, session):
    before = samples(server, session)
    for path, review in _reviews().values():
        assert server.post_json(path, review, session).status_code == 200
    assert session.post(server.url + "/validate", data=b"{bad", timeout=10).status_code == 400
    after = samples(server, session)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("gpushare_admission_requests_total", endpoint="mutate", kind="Pod", operation="CREATE",
                outcome="allowed") == 1
    assert grew("gpushare_admission_requests_total", endpoint="validate", kind="Job", operation="CREATE",
                outcome="denied") == 1
    assert grew("gpushare_admission_requests_total", endpoint="validate", kind="", operation="",
                outcome="invalid") == 1
    assert grew("gpushare_denials_total", rule="GS001") == 1
    assert grew("gpushare_denials_total", rule="GS004") == 1
    assert grew("gpushare_patches_total", mutation="GM001") == 1
    assert grew("gpushare_patches_total", mutation="GM003") == 1
    assert grew("gpushare_admission_duration_seconds_count", endpoint="mutate") == 1
    assert value(after, "gpushare_in_flight_requests") == 0  # a scrape holds no evaluation slot
    assert value(after, "gpushare_open_connections") >= 1
    assert value(after, "process_resident_memory_bytes") > 0


def test_dry_run_and_extender_calls_are_counted_and_logged(server, session):
    before = samples(server, session)
    manifest = b"apiVersion: v1\nkind: Pod\nmetadata: {name: counted}\nspec: {containers: [{name: c}]}\n"
    assert session.post(server.url + "/dry-run", data=manifest, timeout=10).status_code == 200
    assert session.post(server.url + "/dry-run", data=b"kind: [", timeout=10).status_code == 400
    assert session.post(server.url + "/scheduler/filter", data=b"{}", timeout=10).status_code == 400
    after = samples(server, session)

    def grew(**labels: str) -> float:
        return (value(after, "gpushare_admission_requests_total", kind="", operation="", **labels)
                - value(before, "gpushare_admission_requests_total", kind="", operation="", **labels))

    assert grew(endpoint="dry-run", outcome="ok") == 1
    assert grew(endpoint="dry-run", outcome="invalid") == 1
    assert grew(endpoint="scheduler-filter", outcome="invalid") == 1
    assert value(after, "gpushare_admission_duration_seconds_count", endpoint="dry-run") \
        - value(before, "gpushare_admission_duration_seconds_count", endpoint="dry-run") == 2
    line = wait_until(lambda: next((json.loads(x) for x in server.log().splitlines()
                                    if '"endpoint":"scheduler-filter"' in x), None),
                      what="the extender refusal's log line")
    assert line["status"] == 400 and line["decision"] == "invalid" and line["reason"]


def test_made_up_kinds_do_not_grow_the_label_set(server, session):
    for index in range(5):
        cm = {"apiVersion": "v1", "kind": f"Made{index}", "metadata": {"name": "x"}}
        server.post_json("/validate", admission_review(cm), session)
    kinds = {dict(labels).get("kind") for name, labels in samples(server, session)
             if name == "gpushare_admission_requests_total"}
    assert "other" in kinds and not any(k and k.startswith("Made") for k in kinds)


def test_state_metrics_describe_the_snapshot(server, session):
    found = samples(server, session)
    assert value(found, "gpushare_state_info", source="demo-snapshot") == 1
    assert value(found, "gpushare_state_synced") == 1
    assert value(found, "gpushare_state_last_event_age_seconds") >= 0
    assert value(found, "gpushare_state_last_event_timestamp_seconds") > 1.7e9


def test_one_json_log_line_per_review_without_the_object(server, session):
    path, review = _reviews()["denied"]
    server.post_json(path, review, session)
    uid = review["request"]["uid"]
    # Request lines are written by a background thread: poll the log with a deadline.
    lines = wait_until(lambda: [json.loads(line) for line in server.log().splitlines() if uid in line],
                       what="the request's log line")
    assert len(lines) == 1
    line = lines[0]
    assert line["logger"] == "gpushare.admission" and line["level"] == "INFO"
    assert line["kind"] == "Job" and line["object"] == "default/mixed" and line["operation"] == "CREATE"
    assert line["decision"] == "denied" and line["denied"] == ["GS001", "GS004"] and line["status"] == 200
    assert line["rules"] == ["GS001", "GS004"] and isinstance(line["duration_ms"], float)
    assert re.match(r"\d{4}-\d\d-\d\dT", line["time"])
    assert "registry.example/cuda" not in server.log()  # no object body, at any level


def test_audit_annotations_name_every_rule_by_effect(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("rules:\n  GS004: {severity: warn}\n")
    with gpushare_server(tmp_path, "--config", str(config)) as running:
        _, review = _reviews()["denied"]
        response = running.post_json("/validate", review).json()["response"]
    assert response["auditAnnotations"] == {"decision": "denied", "rules": "GS001,GS004", "denied": "GS001",
                                            "warned": "GS004"}


def test_every_metric_and_log_field_is_documented(server, session):
    docs = DOCS.read_text() + (DOCS.parent / "metrics.md").read_text()
    names = {family.name for family in text_string_to_metric_families(session.get(server.url + "/metrics",
                                                                                   timeout=10).text)}
    ours = {n for n in names if n.startswith("gpushare_")}
    assert len(ours) >= 14
    missing = [n for n in sorted(ours) if n not in docs]
    assert not missing, f"undocumented metrics: {missing}"
    path, review = _reviews()["patched"]
    server.post_json(path, review, session)
    line = wait_until(lambda: next((json.loads(x) for x in server.log().splitlines()
                                    if review["request"]["uid"] in x), None), what="the request's log line")
    assert not [k for k in line if f"`{k}`" not in docs], "undocumented log fields"
