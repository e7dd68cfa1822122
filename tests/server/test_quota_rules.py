"""GQ001-GQ004: GPU quota objects judged in `gpushare check`, /dry-run and at admission (the real server),
and sent to the webhook only when they name a GPU resource (the generated matchCondition, in CEL)."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.deploy.test_match_conditions import sent
from tests.support.check_helpers import check_json, line_of
from tests.support.helpers import DATA, admission_review

pytestmark = pytest.mark.processes

QUOTAS = DATA / "quota"
UNENFORCED = QUOTAS / "unenforced.yaml"
ENFORCED = QUOTAS / "enforced.yaml"
QUOTA_WEBHOOK = "quotas.validate.gpushare.io"

BARE = ('GQ001: ResourceQuota team-a/bare-key spec.hard["aliyun.com/gpu-mem"] limits nothing: quota counts '
        "aliyun.com/gpu-mem, an extended resource, only under requests.aliyun.com/gpu-mem, so pods asking for it "
        "are admitted whatever it says; write requests.aliyun.com/gpu-mem: 40 instead")
LIMITS = ('GQ001: ResourceQuota team-b/limits-key spec.hard["limits.aliyun.com/gpu-mem"] limits nothing: quota '
          "counts aliyun.com/gpu-mem, an extended resource, only under requests.aliyun.com/gpu-mem, so pods asking "
          "for it are admitted whatever it says; write requests.aliyun.com/gpu-mem: 40 instead")
BYTES = ('GQ002: ResourceQuota team-c/bytes spec.hard["requests.aliyun.com/gpu-mem"] is 16Gi (17,179,869,184 GiB, '
         "more than a pebibyte of GPU memory): it looks like bytes, but aliyun.com/gpu-mem counts GiB; write 16 "
         "(16Gi as GiB, rounded up), or 2147483647 for no limit")
ROOT = ("GQ004: ElasticQuotaTree kube-system/elasticquotatree root quota node root has aliyun.com/gpu-mem min 100 "
        "and max 120: the root stands for what the cluster gives the whole tree and has no parent to borrow from; "
        "set both to 120")
MIN_OVER_MAX = ("GQ003: ElasticQuotaTree kube-system/elasticquotatree quota node team-a has min aliyun.com/gpu-mem "
                "60 above its max 40: min is guaranteed and max is the most the node may use; set min to at most "
                "40 or max to at least 60")
TREE_BYTES = ('GQ002: ElasticQuotaTree kube-system/elasticquotatree quota node team-b max["aliyun.com/gpu-mem"] is '
              "80Gi (85,899,345,920 GiB, more than a pebibyte of GPU memory): it looks like bytes, but "
              "aliyun.com/gpu-mem counts GiB; write 80 (80Gi as GiB, rounded up), or 2147483647 for no limit")
QUEUE_BYTES = ('GQ002: ClusterQueue research flavor "default-flavor" resource aliyun.com/gpu-mem nominalQuota is '
               "64Gi (68,719,476,736 GiB, more than a pebibyte of GPU memory): it looks like bytes, but "
               "aliyun.com/gpu-mem counts GiB; write 64 (64Gi as GiB, rounded up), or 2147483647 for no limit")
EXPECTED = [(BARE, "deny", "counted by nothing at all"), (LIMITS, "deny", "limits.aliyun.com/gpu-mem"),
            (BYTES, "deny", "requests.aliyun.com/gpu-mem: 16Gi"), (ROOT, "warn", '      aliyun.com/gpu-mem: "120"'),
            (MIN_OVER_MAX, "deny", '        aliyun.com/gpu-mem: "60"'),
            (TREE_BYTES, "deny", "aliyun.com/gpu-mem: 80Gi"), (QUEUE_BYTES, "deny", "nominalQuota: 64Gi")]


def _objects(path):
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_check_judges_each_quota_mistake_with_its_fix():
    code, report = check_json(UNENFORCED)
    assert code == 1
    found = sorted((f["line"], f["message"], f["severity"]) for f in report["findings"])
    assert found == sorted((line_of(UNENFORCED, needle), message, severity) for message, severity, needle in EXPECTED)
    assert report["summary"]["objects"] == 5 and report["summary"]["skipped"] == 0


def test_quotas_written_as_quota_counts_them_pass():
    code, report = check_json(ENFORCED)
    assert (code, report["findings"], report["summary"]["objects"]) == (0, [], 3)


def test_dry_run_reports_the_same_verdicts(server, session):
    reply = session.post(server.url + "/dry-run", data=UNENFORCED.read_bytes(),
                         headers={"Content-Type": "application/yaml"}, timeout=15)
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    messages = [(v["message"] if isinstance(v, dict) else v) for r in results
                for v in [*r["violations"], *r["warnings"]]]
    assert sorted(messages) == sorted(message for message, _, _ in EXPECTED)
    assert [r["allowed"] for r in results] == [False, False, False, False, False]


def _validate(server, session, obj, **review):
    reply = server.post_json("/validate", admission_review(obj, **review), session).json()["response"]
    return reply


def test_admission_denies_an_unenforced_key_naming_the_fix(server, session):
    quota = _objects(UNENFORCED)[0]
    response = _validate(server, session, quota)
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert BARE in response["status"]["message"]


def test_admission_judges_the_change_not_the_quota(server, session):
    # An old quota that already held the bare key: an unrelated edit is admitted, a new bare value is not.
    old = _objects(UNENFORCED)[1]
    edited = copy.deepcopy(old)
    edited["spec"]["hard"]["requests.cpu"] = "128"
    response = _validate(server, session, edited, operation="UPDATE", old=old)
    assert response["allowed"] is True and not response.get("warnings")
    raised = copy.deepcopy(old)
    raised["spec"]["hard"]["limits.aliyun.com/gpu-mem"] = "80"
    response = _validate(server, session, raised, operation="UPDATE", old=old)
    assert response["allowed"] is False and "limits.aliyun.com/gpu-mem" in response["status"]["message"]


def test_admission_judges_the_tree_in_kube_system(server, session):
    tree = _objects(UNENFORCED)[3]
    response = _validate(server, session, tree, group="scheduling.sigs.k8s.io", version="v1beta1",
                         resource="elasticquotatrees")
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert MIN_OVER_MAX in message and TREE_BYTES in message
    assert response["warnings"] == [ROOT]


def test_the_unlimited_tree_of_the_corpus_is_admitted_silently(server, session):
    tree = _objects(DATA / "corpus" / "manifests" / "39-doa-default-eq-tree.yaml")[0]
    response = _validate(server, session, tree, group="scheduling.sigs.k8s.io", version="v1beta1",
                         resource="elasticquotatrees")
    assert response["allowed"] is True and not response.get("warnings")
    # ... and it is judged: the same tree with a root whose max is not its min is warned.
    tree["spec"]["root"]["min"]["aliyun.com/gpu-mem"] = "100"
    response = _validate(server, session, tree, group="scheduling.sigs.k8s.io", version="v1beta1",
                         resource="elasticquotatrees")
    assert response["allowed"] is True
    assert [w.split(":")[0] for w in response["warnings"]] == ["GQ004"]


@pytest.mark.parametrize(("resource", "obj", "expected"), [
    ("resourcequotas", {"spec": {"hard": {"requests.aliyun.com/gpu-mem": "40"}}}, True),
    ("resourcequotas", {"spec": {"hard": {"aliyun.com/gpu-mem": "40"}}}, True),
    ("resourcequotas", {"spec": {"hard": {"limits.nvidia.com/gpu": "4"}}}, True),
    ("resourcequotas", {"spec": {"hard": {"requests.cpu": "4", "pods": "10"}}}, False),
    ("resourcequotas", {"spec": {"scopes": ["BestEffort"]}}, False),
    ("resourcequotas", {}, False),
    ("elasticquotatrees", {"spec": {"root": {"name": "root", "max": {"cpu": "1"}}}}, True),
    ("clusterqueues", {"spec": {"resourceGroups": [{"flavors": [{"name": "f", "resources": [
        {"name": "aliyun.com/gpu-mem", "nominalQuota": 8}]}]}]}}, True),
    ("clusterqueues", {"spec": {"resourceGroups": [{"flavors": [{"name": "f", "resources": [
        {"name": "cpu", "nominalQuota": 8}]}]}]}}, False),
    ("clusterqueues", {"spec": {}}, False),
], ids=lambda v: v if isinstance(v, str) else None)
def test_only_quota_objects_naming_a_gpu_resource_are_sent(resource, obj, expected):
    from policies.model.settings import PolicySettings
    from policies.rules.quota_rules import NAMES_A_GPU_QUOTA
    from policies.rules.relevance import resolve

    assert sent(QUOTA_WEBHOOK, obj, resource=resource) is expected
    kind = {"resourcequotas": "ResourceQuota", "elasticquotatrees": "ElasticQuotaTree",
            "clusterqueues": "ClusterQueue"}[resource]
    settings = PolicySettings()
    assert resolve([NAMES_A_GPU_QUOTA], settings).sends(kind, obj, settings) is expected


def test_every_quota_a_rule_judges_is_sent():
    from policies.admission.engine import Engine
    from policies.model.settings import PolicySettings

    engine = Engine(PolicySettings())
    resources = {"ResourceQuota": "resourcequotas", "ElasticQuotaTree": "elasticquotatrees",
                 "ClusterQueue": "clusterqueues"}
    for obj in _objects(UNENFORCED):
        verdict = engine.validate(engine.subject(obj["kind"], obj))
        assert verdict.findings
        assert sent(QUOTA_WEBHOOK, obj, resource=resources[obj["kind"]])
