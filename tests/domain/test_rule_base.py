"""What every rule is shown of the object under review (policies/rules/base.py)."""

from __future__ import annotations

import pytest

from policies.model.cluster import Availability
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.settings import Names
from policies.model.subject import StateUnavailable, Subject, computed_once
from policies.rules.base import REGISTRY, Finding, rule
from tests.support.manifests import CORE, MEM, container, pod_spec, workload

NAMES = Names()


def subject(obj, kind="Pod", namespace="", **kwargs) -> Subject:
    return Subject(kind=kind, obj=obj, names=NAMES, request_namespace=namespace, **kwargs)


@pytest.mark.parametrize(("metadata", "namespace", "label"), [
    ({"name": "p", "namespace": "team"}, "default", "Pod team/p"),
    ({"name": "p"}, "default", "Pod default/p"),
    ({"name": "p", "namespace": ""}, "default", "Pod default/p"),
    ({"name": "p", "namespace": 3}, "default", "Pod default/p"),
    ({"generateName": "job-"}, "default", "Pod default/job-*"),
    ({"name": "", "generateName": "job-"}, "default", "Pod default/job-*"),
    ({"name": 7, "generateName": ""}, "default", "Pod default/<unnamed>"),
    ({}, "", "Pod <unnamed>"),
    ("not-a-mapping", "default", "Pod default/<unnamed>"),
])
def test_how_messages_name_the_object(metadata, namespace, label):
    assert subject({"kind": "Pod", "metadata": metadata}, namespace=namespace).label == label


def test_a_node_has_no_namespace():
    assert subject({"metadata": {"name": "gpu-1"}}, kind="Node").label == "Node gpu-1"


def test_where_names_init_containers():
    obj = workload("Job", pod_spec(container("main", limits={MEM: 1}), init=[container("warm", limits={MEM: 1})]))
    s = subject(obj, kind="Job", namespace="default")
    assert [s.where(c) for c in s.containers] == ['Job default/w init container "warm"',
                                                  'Job default/w container "main"']


def test_asked_is_every_gpu_resource_in_limits_or_requests():
    obj = workload("Pod", pod_spec(container("a", limits={MEM: 1}), container("b", requests={CORE: 30}),
                                   container("c", limits={"cpu": "1"})))
    assert subject(obj).asked == {MEM, CORE}


class Unusable(ClusterSnapshot):
    def availability(self) -> Availability:
        return Availability(False, "not synced yet")


def test_usable_state_says_why_not():
    with pytest.raises(StateUnavailable) as caught:
        subject({"metadata": {}}).usable_state("placement", "Pod p: not checked")
    assert (caught.value.switch, caught.value.what, caught.value.reason, str(caught.value)) == (
        "placement", "Pod p: not checked", "no cluster state was given",
        "Pod p: not checked: no cluster state was given")
    with pytest.raises(StateUnavailable, match=r"^x: not synced yet$"):
        subject({"metadata": {}}, state=Unusable()).usable_state("s", "x")
    state = ClusterSnapshot()
    assert subject({"metadata": {}}, state=state).usable_state("s", "x") is state


def test_computed_once_computes_once_per_object():
    calls = []

    class Thing:
        @computed_once
        def value(self) -> int:
            """The value."""
            calls.append(1)
            return len(calls)

    a, b = Thing(), Thing()
    assert (a.value, a.value, b.value) == (1, 1, 2)
    assert isinstance(Thing.value, computed_once) and Thing.value.__doc__ == "The value."
    assert Thing.value.name == "value"


def test_a_rule_id_registers_once():
    first = next(iter(REGISTRY))
    with pytest.raises(ValueError, match=f"^rule {first} registered twice$"):
        rule(first, severity="deny", title="t", doc="d", seed="000", kinds=("Pod",))(lambda s: [])


def test_a_rule_that_judges_objects_declares_what_makes_them_relevant():
    with pytest.raises(ValueError, match=r"^rule GX901 judges \['Binding', 'Pod'\] but declares no relevance$"):
        rule("GX901", severity="deny", title="t", doc="d", seed="000", kinds=("Pod", "Binding"))(lambda s: [])
    assert "GX901" not in REGISTRY


def test_a_rule_registers_what_it_declares_and_its_defaults():
    from policies.rules.relevance import NOTHING, Relevance

    def check(subject):
        return []

    declared = Relevance(resources=("gpu_mem",))
    try:
        assert rule("GX902", severity="warn", title="t", doc="d", seed="000", kinds=["Pod", "Pod"],
                    relevance=declared, subresources=["ephemeralcontainers"])(check) is check
        assert rule("GX903", severity="deny", title="t3", doc="d3", seed="001", kinds=())(check) is check
        gx902, gx903 = REGISTRY["GX902"], REGISTRY["GX903"]
        assert (gx902.id, gx902.severity, gx902.title, gx902.doc, gx902.seed, gx902.kinds, gx902.check) == (
            "GX902", "warn", "t", "d", "000", frozenset({"Pod"}), check)
        assert (gx902.relevance, gx902.subresources) == (declared, frozenset({"ephemeralcontainers"}))
        assert (gx903.kinds, gx903.operations, gx903.stateful, gx903.applies, gx903.family, gx903.relevance,
                gx903.subresources) == (frozenset(), frozenset({"CREATE", "UPDATE"}), False, None, "", NOTHING,
                                        frozenset())
    finally:
        REGISTRY.pop("GX902", None)
        REGISTRY.pop("GX903", None)


def test_registered_rules_keep_what_they_declared():
    gs001, gn005, gb004 = REGISTRY["GS001"], REGISTRY["GN005"], REGISTRY["GB004"]
    assert (gs001.operations, gs001.stateful, gs001.severity) == (frozenset({"CREATE", "UPDATE"}), False, "deny")
    assert gn005.operations == frozenset({"UPDATE"}) and gn005.kinds == frozenset({"Node"})
    assert (gb004.operations, gb004.stateful, gb004.kinds) == (frozenset({"CREATE"}), True,
                                                               frozenset({"Binding", "Pod"}))
    assert REGISTRY["GE001"].severity == "warn" and REGISTRY["GS001"].applies is not None


def test_finding_path_text():
    assert Finding("GS001", "deny", "m", ("spec", "containers", 0, "resources", "limits", MEM)).path_text == (
        f'spec.containers[0].resources.limits["{MEM}"]')
    assert Finding("GS001", "deny", "m").path_text == ""


def test_findings_rules_and_users_cannot_be_changed_once_made():
    import dataclasses

    from policies.model.subject import UserInfo

    with pytest.raises(dataclasses.FrozenInstanceError):
        UserInfo("alice").username = "mallory"  # type: ignore[misc]
    finding = Finding("GS001", "deny", "m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.message = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        REGISTRY["GS001"].severity = "warn"  # type: ignore[misc]


def test_what_a_check_finds_cannot_be_changed_once_found():
    import dataclasses

    from policies.rules.base import Found

    found = Found("m", ("spec",), advisory=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.advisory = False  # type: ignore[misc]
    assert (found.message, found.path, found.advisory, found.brief) == ("m", ("spec",), True, "")


def test_the_placement_family_is_the_five_binding_rules():
    from policies.rules.rule_index import rule_ids

    assert rule_ids("placement") == frozenset({"GB001", "GB002", "GB003", "GB004", "GB005"})
    assert rule_ids("no such family") == frozenset()
