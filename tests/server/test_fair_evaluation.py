"""Fair evaluation through the real server, with both workers: an object over the evaluation
budget is denied (or admitted unjudged where configured) in a small answer that says what was
counted, the limit and what is accepted; answers stay within what the API server passes on
(warnings of 256 characters, 4,096 in all; a denial's message and audit annotations of 4 KiB; a
patch of what it changes only); and small reviews are answered while large ones are in flight.

The 4 MiB bodies are encoded as kube-apiserver encodes them (tests/support/go_json.py), from the real
Volcano Job sample in tests/data/workloads."""

from __future__ import annotations

import base64
import copy
import json
from contextlib import ExitStack

import pytest
import yaml

from policies.model.warning_text import WARNINGS_TOTAL_LIMIT
from tests.support.helpers import DATA, admission_review, costly_pod, gpushare_server, load_json
from tests.support.large_reviews import BODY_LIMIT, create_body
from tests.support.manifests import container, pod, pod_spec
from tests.support.raw_client import COSTLY_TERMS, metric, one_slot_server, read_response, request, start_costly, tls
from webhook.server.scheduling import Route, Scheduler, Work
from webhook.settings import OverloadSettings

pytestmark = [pytest.mark.both_workers, pytest.mark.processes]
MEM, CORE = "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage"
ACCEPTED = ("accepted: at most 256 pod templates, 1024 containers and 4096 affinity terms in one object (real "
            "workloads have a few of each), or a larger {setting} in the webhook's configuration")


def _post(server, body: bytes, path: str = "/validate") -> tuple[dict, int]:
    reply = server.session().post(server.url + path, data=body, headers={"Content-Type": "application/json"},
                                  timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()["response"], len(reply.content)


def _volcano(tasks: int) -> dict:
    """The Volcano Job sample with ``tasks`` copies of its GPU worker task (each breaks GW001: its
    pods would be scheduled by volcano)."""
    job = yaml.safe_load((DATA / "workloads" / "volcanojob.yaml").read_text())
    job["metadata"]["namespace"] = "default"
    worker = job["spec"]["tasks"][1]
    job["spec"]["tasks"] = [{**copy.deepcopy(worker), "name": f"w{i}"} for i in range(tasks)]
    return job


def _review_of(obj: dict, **kwargs) -> bytes:
    group = obj["apiVersion"].rpartition("/")[0]
    return json.dumps(admission_review(obj, group=group, version="v1alpha1", resource="jobs", **kwargs)).encode()


@pytest.fixture(scope="module")
def volcano_at_the_limit() -> bytes:
    _, body = create_body("Job.batch.volcano.sh", "templates")
    assert BODY_LIMIT - 8192 < len(body) <= BODY_LIMIT
    return body


def test_a_volcano_job_at_the_body_limit_is_denied_by_the_budget_in_a_small_answer(server, volcano_at_the_limit):
    """4 MiB of Volcano Job (5,866 tasks) was judged for seconds and answered with megabytes of
    warnings; now it is counted, refused at its 257th template, and answered in under 2 KiB on
    both endpoints."""
    for path in ("/validate", "/mutate"):
        response, size = _post(server, volcano_at_the_limit, path)
        assert response["allowed"] is False
        assert response["status"]["message"] == (
            "budget: Job.batch.volcano.sh default/tensorflow-dist-mnist is too large to evaluate: more than 256 pod "
            "templates (budget.max_templates) (counted before stopping: 257 pod templates, 257 containers, 0 "
            "affinity terms); " + ACCEPTED.format(setting="budget.max_templates")
            + "; denied (budget.when_exceeded: deny)")
        assert response["auditAnnotations"]["rules"] == "budget"
        assert "patch" not in response
        assert size < 2048


def test_a_pod_of_many_containers_is_denied_by_the_budget(server):
    body = json.dumps(admission_review(pod(pod_spec(*[container(f"c{i}", {MEM: 1}) for i in range(1025)])))).encode()
    response, _ = _post(server, body)
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(
        "budget: Pod default/p is too large to evaluate: more than 1024 containers (budget.max_containers) "
        "(counted before stopping: 1 pod template, 1025 containers, 0 affinity terms); ")


def test_an_object_within_the_budget_is_judged_as_before(server):
    at_limit = pod(pod_spec(*[container(f"c{i}", {CORE: 30}) for i in range(1024)]))
    response, _ = _post(server, json.dumps(admission_review(at_limit)).encode())
    assert response["allowed"] is False  # GS002 on every container, not the budget
    assert response["auditAnnotations"]["denied"] == "GS002"


@pytest.fixture(scope="module")
def admitting(tmp_path_factory, worker_kind):
    """A server whose budget fails open (budget.when_exceeded: admit)."""
    with gpushare_server(tmp_path_factory.mktemp("admit"), worker=worker_kind,
                         env={"GPUSHARE_BUDGET__WHEN_EXCEEDED": "admit"}) as running:
        yield running


def test_with_when_exceeded_admit_an_object_over_the_budget_is_admitted_unjudged_with_a_warning(
        admitting, volcano_at_the_limit):
    response, size = _post(admitting, volcano_at_the_limit)
    assert response["allowed"] is True
    assert response["warnings"] == [
        "budget: Job.batch.volcano.sh default/tensorflow-dist-mnist is too large to evaluate: more than 256 pod "
        "templates (budget.max_templates); admitted without evaluation (budget.when_exceeded: admit)"]
    assert response["auditAnnotations"]["warned"] == "budget"
    assert response["auditAnnotations"]["warning.budget"].startswith("budget: Job.batch.volcano.sh default/")
    assert size < 4096
    assert _post(admitting, volcano_at_the_limit, "/mutate")[0].get("patch") is None  # not patched unjudged


def test_warnings_stay_within_what_the_api_server_passes_on(server):
    """256 Volcano tasks, each warned about by GW001: the answer carries as many whole warnings as
    fit in 4,096 characters, then one saying how many more, of which rule; the audit annotation
    keeps 4 KiB of the whole texts."""
    response, size = _post(server, _review_of(_volcano(256)))
    assert response["allowed"] is True
    warnings = response["warnings"]
    assert all(len(w) <= 256 for w in warnings)
    assert sum(len(w) for w in warnings) <= WARNINGS_TOTAL_LIMIT
    shown = warnings[:-1]
    assert shown and all(w.startswith("GW001: Job.batch.volcano.sh default/tensorflow-dist-mnist spec.tasks[")
                         for w in shown)
    assert warnings[-1] == (f"… and {256 - len(shown)} more warnings (GW001 x{256 - len(shown)}); the audit "
                            "annotations name every rule")
    assert all(len(v) <= 4096 for v in response["auditAnnotations"].values())
    assert size < 16 * 1024


def test_a_denial_of_many_containers_has_a_bounded_message(server):
    broken = pod(pod_spec(*[container(f"c{i}", {CORE: 30}) for i in range(1000)]))
    response, size = _post(server, json.dumps(admission_review(broken)).encode())
    message = response["status"]["message"]
    assert response["allowed"] is False and len(message) <= 4096
    assert message.startswith('GS002: Pod default/p container "c0": aliyun.com/gpu-core.percentage=30 is requested')
    assert message.endswith("more violations (GS002 x" + message.rsplit(" x", 1)[1])
    assert size < 16 * 1024


def test_a_patch_changes_only_what_it_changes(server):
    """/mutate of a pod of 1,000 GPU containers: one op per container, adding the one environment
    variable (never the container or its list again), and the scheduler's name."""
    many = pod(pod_spec(*[container(f"c{i}", {MEM: 2}) for i in range(1000)]))
    response, _ = _post(server, json.dumps(admission_review(many)).encode(), "/mutate")
    ops = json.loads(base64.b64decode(response["patch"]))
    assert len(ops) == 1001
    assert ops[0]["path"] == "/spec/schedulerName" and ops[0]["value"] == "ack-co-scheduler"
    for i, op in enumerate(ops[1:]):
        assert op == {"op": "add", "path": f"/spec/containers/{i}/env",
                      "value": [{"name": "ALIYUN_COM_GPU_MEM_CONTAINER", "value": "2"}]}


def test_small_reviews_are_answered_while_large_ones_are_in_flight(tmp_path, worker_kind):
    """Two costly reviews over overload.large_body_bytes (about 360 KB, seconds each at 2,000
    nodes) take the large reviews' lane, one evaluating and one waiting; small reviews sent
    meanwhile are each answered with their own uid while the large ones are still in flight, then
    the large ones are answered too."""
    lane = {"GPUSHARE_OVERLOAD__LARGE_BODY_BYTES": str(256 * 1024)}  # the default, over one_slot_server's
    with one_slot_server(tmp_path, lane, worker=worker_kind) as server, ExitStack() as stack:
        first = start_costly(server, stack, "lane-a")
        second = tls(server, stack, timeout=120)
        second.sendall(request(json.dumps(admission_review(_costly_twin())).encode(), path="/validate?timeout=30s"))
        small = tls(server, stack, timeout=60)
        for i in range(5):
            small.sendall(request(json.dumps(admission_review(load_json("pod-realistic.json"), uid=f"s{i}")).encode(),
                                  path="/validate?timeout=5s"))
            status, _, reply = read_response(small)
            assert status == 200 and json.loads(reply)["response"]["uid"] == f"s{i}"
        assert metric(server, "gpushare_in_flight_requests") >= 1  # a large review is still evaluating
        assert read_response(first)[0] == 200
        assert read_response(second)[0] == 200


def _costly_twin() -> dict:
    return costly_pod("lane-b", COSTLY_TERMS)


def test_large_reviews_wait_and_are_refused_in_their_own_lane_only():
    """The scheduler alone (no sockets, its own clock): a review over overload.large_body_bytes,
    or of unknown length, is a large review; while one evaluates and another has waited past its
    deadline, a large review arriving is refused, and a small one is still evaluated by the
    poller at once."""
    scheduler: Scheduler[str] = Scheduler(OverloadSettings())
    assert scheduler.lane(Work.REVIEW, 4096) is Work.REVIEW
    assert scheduler.lane(Work.REVIEW, 256 * 1024 + 1) is Work.LARGE_REVIEW
    assert scheduler.lane(Work.REVIEW, None) is Work.LARGE_REVIEW  # chunked: its size is unknown
    assert scheduler.lane(Work.TOOL, 4 * 1024 * 1024) is Work.TOOL
    assert scheduler.arrive("a", Work.LARGE_REVIEW, "5s", 0.0, inline=False) is Route.THREAD
    assert scheduler.arrive("b", Work.LARGE_REVIEW, "5s", 0.0, inline=False) is Route.QUEUED
    assert scheduler.refusal(Work.LARGE_REVIEW, "5s", 4.0) == "late"  # b has waited 4 s of its 3.75
    assert scheduler.refusal(Work.REVIEW, "5s", 4.0) is None
    assert scheduler.arrive("small", Work.REVIEW, "5s", 4.0, inline=True) is Route.POLLER
    assert scheduler.next_for_poller(4.0) == ("small", Work.REVIEW, None)
