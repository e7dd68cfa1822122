"""GN001-GN008 word for word, and on UPDATE only what the update changes is judged."""

from __future__ import annotations

import pytest

from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.subject import UserInfo
from policies.rules.node_rules import region_of, shows_mps_daemon
from tests.support.cluster_objects import gpu_pod, node, relabel, with_mode
from tests.support.manifests import received

NAME = "cn-beijing.192.168.1.10"
SCHEDULE, PLACEMENT, POLICY = "ack.node.gpu.schedule", "ack.node.gpu.placement", "gpushare.io/cpu-manager-policy"


def findings(engine, obj, *, old=None, user=None, state=None, rule=None):
    subject = engine.subject(received("Node"), received(obj), operation=received("UPDATE" if old else "CREATE"),
                             old=received(old), user=user, state=state)
    return [(f.rule, f.severity, f.message, f.path_text) for f in engine.validate(subject).findings
            if rule is None or f.rule == rule]


def state_with(settings, *objects) -> ClusterSnapshot:
    state = ClusterSnapshot()
    for obj in objects:
        if obj["kind"] == "Node":
            state.upsert_node(node_from_manifest(obj, settings.names))
        else:
            state.record_pod(pod_from_manifest(obj, settings.names))
    return state


# ---- GN001 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("mode", "shown"), [("topology", "topology"), ("default", "default"),
                                             (None, "unset (exclusive)")])
def test_gn001_placement_without_a_shared_mode(engine, mode, shown):
    obj = relabel(node(mode=mode), **{PLACEMENT: "spread"})
    assert findings(engine, obj, rule="GN001") == [(
        "GN001", "warn", f"GN001: Node {NAME}: {PLACEMENT}=spread has no effect with {SCHEDULE}={shown}; it applies "
                         "only to the shared modes cgpu, core_mem, mps, share", f'metadata.labels["{PLACEMENT}"]')]


@pytest.mark.parametrize("mode", ["cgpu", "core_mem", "share", "mps"])
@pytest.mark.parametrize("placement", ["binpack", "spread"])
def test_gn001_placement_with_a_shared_mode(engine, mode, placement):
    assert findings(engine, relabel(node(mode=mode), **{PLACEMENT: placement}), rule="GN001") == []


def test_gn001_an_empty_mode_label_is_not_a_mode(engine):
    assert findings(engine, node(mode=""), rule="GN001")[0][2] == (
        f"GN001: Node {NAME}: {SCHEDULE}='' is not a GPU scheduling mode; use one of cgpu, core_mem, default, "
        "disabled, mig, mps, share, topology")


def test_gn001_on_update_only_a_changed_value_is_judged(engine):
    old = relabel(node(mode="bogus"), **{PLACEMENT: "pack"})
    assert findings(engine, relabel(old, team="x"), old=old, rule="GN001") == []
    # a new mode is judged, and the placement with it (whether it means something depends on the mode)
    assert [f[3] for f in findings(engine, with_mode(old, "bogus2"), old=old, rule="GN001")] == [
        f'metadata.labels["{SCHEDULE}"]', f'metadata.labels["{PLACEMENT}"]']
    moved = relabel(old, **{PLACEMENT: "packed"})
    assert [f[3] for f in findings(engine, moved, old=old, rule="GN001")] == [f'metadata.labels["{PLACEMENT}"]']
    # the placement is judged again when the mode it depends on changes
    topo = relabel(node(mode="cgpu"), **{PLACEMENT: "spread"})
    assert findings(engine, with_mode(topo, "topology"), old=topo, rule="GN001")[0][1] == "warn"


# ---- GN002 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("where", ["labels", "annotations"])
def test_gn002_word_for_word(engine, where):
    obj = relabel(node(mode="share"), **{"gpushare.io__cpu-manager-policy": None})
    obj["metadata"][where][POLICY] = "static"
    assert findings(engine, obj, rule="GN002") == [(
        "GN002", "deny", f"GN002: Node {NAME}: {SCHEDULE}=share on a node whose CPU manager policy is static "
                         f"({POLICY}=static); shared GPU scheduling needs policy none, or use {SCHEDULE}=default",
        f'metadata.{where}["{POLICY}"]')]


def test_gn002_on_update_only_when_mode_or_policy_changes(engine):
    old = relabel(node(mode="share"), **{"gpushare.io__cpu-manager-policy": "static"})
    assert findings(engine, relabel(old, team="x"), old=old, rule="GN002") == []
    assert len(findings(engine, with_mode(old, "cgpu"), old=old, rule="GN002")) == 1
    none = relabel(old, **{"gpushare.io__cpu-manager-policy": "none"})
    assert len(findings(engine, old, old=none, rule="GN002")) == 1


# ---- GN003 / GN004: where the node is (pinned as a table, easy to update) ------------------------------

@pytest.mark.parametrize(("labels", "provider_id", "region"), [
    ({"topology.kubernetes.io/region": "cn-hangzhou"}, "alicloud://cn-beijing.i-1", "cn-hangzhou"),
    ({}, "alicloud://cn-beijing.i-2ze0demo", "cn-beijing"),
    ({}, "alicloud://i-2ze0demo", ""),
    ({}, "aws:///us-east-1a/i-1", ""),
    ({}, "", ""),
])
def test_region_of_a_node(engine, labels, provider_id, region):
    obj = node(region=None, provider_id=provider_id, labels=labels)
    subject = engine.subject("Node", obj)
    assert region_of(node_from_manifest(obj, subject.names), subject) == region


def test_gn003_on_update_only_when_mode_or_region_changes(engine):
    old = node(mode="cgpu", region="eu-west-1", provider_id="alicloud://eu-west-1.i-1")
    assert findings(engine, relabel(old, team="x"), old=old, rule="GN003") == []
    assert len(findings(engine, old, old=with_mode(old, "share"), rule="GN003")) == 1


def test_gn004_word_for_word(engine):
    obj = node(mode="core_mem", provider_id="aws:///us-east-1a/i-1")
    assert findings(engine, obj, rule="GN004") == [(
        "GN004", "deny", f"GN004: Node {NAME}: {SCHEDULE}=core_mem needs an ECS node (spec.providerID "
                         "REGION.INSTANCEID, e.g. cn-hangzhou.i-bp16uimj7fl6ze8q5rf3, bare or behind alicloud://), "
                         f"but spec.providerID is aws:///us-east-1a/i-1; use {SCHEDULE}=share on non-ECS nodes",
        f'metadata.labels["{SCHEDULE}"]')]
    assert "spec.providerID is empty;" in findings(engine, node(mode="cgpu", provider_id=None), rule="GN004")[0][2]
    assert findings(engine, node(mode="share", provider_id=None), rule="GN004") == []


def test_gn004_on_update_only_when_mode_or_provider_changes(engine):
    old = node(mode="cgpu", provider_id=None)
    assert findings(engine, relabel(old, team="x"), old=old, rule="GN004") == []
    assert len(findings(engine, old, old=with_mode(old, "share"), rule="GN004")) == 1


def test_gn004_other_taints_do_not_mean_waiting(engine):
    obj = node(mode="cgpu", provider_id=None, taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    assert findings(engine, obj, rule="GN004")[0][1] == "deny"


# ---- GN005 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("before", "user", "shown_before", "who"), [
    ("cgpu", UserInfo("alice"), "cgpu", "alice"), (None, UserInfo(), "unset", "an unnamed user"),
])
def test_gn005_word_for_word(engine, before, user, shown_before, who):
    old = node(mode=before)
    assert findings(engine, with_mode(old, "core_mem"), old=old, user=user, rule="GN005") == [(
        "GN005", "deny", f"GN005: Node {NAME}: {SCHEDULE} {shown_before} -> core_mem by {who} relabels an existing "
                         "node, which does not enable computing power allocation; remove the node and add it to a "
                         "node pool labelled core_mem (node-pool identities allowed to relabel: none configured)",
        f'metadata.labels["{SCHEDULE}"]')]


def test_gn005_names_the_identities_and_lets_them_through():
    from policies.admission.engine import Engine
    from webhook.settings import Settings

    engine = Engine(Settings(nodes={"node_pool_users": ["system:serviceaccount:kube-system:ack-pool"],
                                    "node_pool_groups": ["pool-admins", "ops"]}))
    old = node(mode="share")
    message = findings(engine, with_mode(old, "core_mem"), old=old, user=UserInfo("bob", ("dev",)), rule="GN005")
    assert message[0][2].endswith("(node-pool identities allowed to relabel: system:serviceaccount:kube-system:ack-pool"
                                  ", group pool-admins, group ops)")
    assert findings(engine, with_mode(old, "core_mem"), old=old, user=UserInfo("carol", ("dev", "ops")),
                    rule="GN005") == []
    assert findings(engine, with_mode(old, "core_mem"), old=old,
                    user=UserInfo("system:serviceaccount:kube-system:ack-pool"), rule="GN005") == []


def test_gn005_core_mem_staying_core_mem_passes(engine):
    old = node(mode="core_mem")
    assert findings(engine, relabel(old, team="x"), old=old, user=UserInfo("alice"), rule="GN005") == []


# ---- GN006 ----------------------------------------------------------------------------------------

def test_gn006_word_for_word(engine, settings):
    old = node(mode=None)
    pods = [gpu_pod("a", node_name=NAME), gpu_pod("b", mem=None, node_name=NAME,
                                                  extra_limits={"nvidia.com/gpu": "1"}),
            gpu_pod("web", mem=None, node_name=NAME)]
    state = state_with(settings, old, *pods)
    assert findings(engine, with_mode(old, "share"), old=old, state=state, rule="GN006") == [(
        "GN006", "deny", f"GN006: Node {NAME}: {SCHEDULE} unset -> share while 2 GPU pod(s) run on it (default/a, "
                         f"default/b); drain the node first, then change the mode (accepted: {SCHEDULE}=unset until "
                         "no GPU pods run there)", f'metadata.labels["{SCHEDULE}"]')]


def test_gn006_removing_default_or_nothing_does_not_warn(engine, settings):
    old = node(mode="default")
    assert findings(engine, with_mode(old, None), old=old, state=state_with(settings, old), rule="GN006") == []


def test_gn006_removing_a_mode_warns_word_for_word(engine, settings):
    old = node(mode="share")
    assert findings(engine, with_mode(old, None), old=old, state=state_with(settings, old), rule="GN006") == [(
        "GN006", "warn", f"GN006: Node {NAME}: removing {SCHEDULE}=share does not restore exclusive GPU scheduling; "
                         f"set {SCHEDULE}=default explicitly", f'metadata.labels["{SCHEDULE}"]')]


# ---- GN008 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("labels", "annotations", "shown"), [
    ({}, {}, False), ({"k": "true"}, {}, True), ({"k": "False"}, {}, False), ({}, {"k": "1"}, True),
    ({"k": "false"}, {"k": "true"}, False),
])
def test_shows_mps_daemon(labels, annotations, shown):
    from policies.model.cluster import NodeInfo

    assert shows_mps_daemon(NodeInfo("n", labels, annotations, "", "", {}, {}), ("x", "k")) is shown


@pytest.mark.parametrize("mode", ["share", "topology", "cgpu", "core_mem", "default"])
def test_gn008_only_on_mps_nodes(engine, mode):
    assert findings(engine, node(mode=mode), rule="GN008") == []


def test_gn008_on_update_only_when_it_changes(engine):
    old = node(mode="mps")
    assert findings(engine, relabel(old, team="x"), old=old, rule="GN008") == []
    assert len(findings(engine, old, old=with_mode(old, "share"), rule="GN008")) == 1


def test_gn005_a_shared_label_changed_to_another_shared_mode_is_warned_about_in_the_page_s_words(engine):
    old = node(mode="share")
    assert findings(engine, with_mode(old, "cgpu"), old=old, user=UserInfo("alice"), rule="GN005") == [(
        "GN005", "warn", f"GN005: Node {NAME}: {SCHEDULE} share -> cgpu: after adding a shared GPU scheduling label, "
                         'do not change it with kubectl label ("Manage the shared GPU scheduling component"); use a '
                         "node pool labelled cgpu", f'metadata.labels["{SCHEDULE}"]')]


@pytest.mark.parametrize(("before", "after"), [
    ("cgpu", "default"), ("topology", "default"), ("mps", "default"),  # "GPU node scheduling labels" says to
    (None, "share"), ("default", "cgpu"), ("topology", "share"),  # no shared label was added before
    ("cgpu", None),  # removing it: GN006 says default must be set explicitly
])
def test_gn005_never_advises_against_what_the_pages_tell_users_to_do(engine, before, after):
    old = node(mode=before)
    assert findings(engine, with_mode(old, after), old=old, user=UserInfo("alice"), rule="GN005") == []


def test_gn006_six_running_pods_are_five_and_one_more(engine, settings):
    old = node(mode="cgpu")
    pods = [gpu_pod(f"p{i}", node_name=NAME) for i in range(6)]
    [finding] = findings(engine, with_mode(old, "share"), old=old, state=state_with(settings, old, *pods),
                         rule="GN006")
    assert "(default/p0, default/p1, default/p2, default/p3, default/p4 and 1 more)" in finding[2]


def test_gn006_twelve_running_pods_are_five_and_seven_more(engine, settings):
    old = node(mode="cgpu")
    pods = [gpu_pod(f"p{i:02}", node_name=NAME) for i in range(12)]
    [finding] = findings(engine, with_mode(old, "share"), old=old, state=state_with(settings, old, *pods),
                         rule="GN006")
    assert "while 12 GPU pod(s) run on it (default/p00, default/p01, default/p02, default/p03, default/p04 and 7 " \
           "more);" in finding[2]


def test_gn005_a_mig_node_relabelled_to_another_value_is_warned_about(engine):
    old = node(mode="mig")
    assert findings(engine, with_mode(old, "share"), old=old, user=UserInfo("alice"), rule="GN005") == [(
        "GN005", "warn", f"GN005: Node {NAME}: {SCHEDULE} mig -> share: \"Labels for enabling GPU scheduling "
                         "policies\" supports no other value on a mig node; use a node pool labelled share",
        f'metadata.labels["{SCHEDULE}"]')]
    # to core_mem: the warning, and the denial every relabel to core_mem gets
    assert [f[1] for f in findings(engine, with_mode(old, "core_mem"), old=old, user=UserInfo("alice"),
                                   rule="GN005")] == ["warn", "deny"]
    # removing the label is GN006's to judge
    assert findings(engine, with_mode(old, None), old=old, user=UserInfo("alice"), rule="GN005") == []


@pytest.mark.parametrize("configz", [False, True])
def test_gn002_an_unknown_policy_says_where_it_was_looked_for_word_for_word(configz):
    from policies.admission.engine import Engine
    from webhook.settings import Settings

    engine = Engine(Settings(state={"kubelet_configz": {"enabled": configz}}))
    how = ("and its kubelet's /configz has not been read or could not be (see the gpushare_kubelet_configz metrics "
           "and the log)" if configz else "and reading it from the kubelet's /configz is off "
           "(state.kubelet_configz.enabled)")
    obj = relabel(node(mode="share"), **{"gpushare.io__cpu-manager-policy": None})
    assert findings(engine, obj, rule="GN002") == [(
        "GN002", "warn", f"GN002: Node {NAME}: {SCHEDULE}=share: the node's CPU manager policy is unknown (no {POLICY} "
                         f"label or annotation, {how}), so whether it is static, which shared GPU scheduling does not "
                         f"support, cannot be checked; publish it as {POLICY} (docs/state.md, \"CPU manager policy\")",
        f'metadata.labels["{SCHEDULE}"]')]


@pytest.mark.processes
def test_the_rules_load_a_nodes_machinery_only_when_a_node_is_judged():
    # `gpushare check` on pods never loads the node record, the catalog or the ECS ids (docs/check.md, "Speed");
    # the whole process is tests/cli/test_check_imports.py.
    import subprocess
    import sys

    probe = ("import sys, policies.rules\n"
             "print(sorted(m for m in ('policies.model.catalog', 'policies.model.cluster', 'policies.model.ecs') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


def test_gn006_five_running_pods_are_all_named(engine, settings):
    old = node(mode="cgpu")
    pods = [gpu_pod(f"p{i}", node_name=NAME) for i in range(5)]
    [finding] = findings(engine, with_mode(old, "share"), old=old, state=state_with(settings, old, *pods),
                         rule="GN006")
    assert "while 5 GPU pod(s) run on it (default/p0, default/p1, default/p2, default/p3, default/p4); drain" \
           in finding[2]


def test_gn006_an_update_that_keeps_the_mode_passes_under_running_pods(engine, settings):
    old = node(mode="cgpu")
    state = state_with(settings, old, *(gpu_pod(f"p{i}", node_name=NAME) for i in range(3)))
    assert findings(engine, relabel(old, team="x"), old=old, state=state, rule="GN006") == []


def test_gn004_a_taint_other_than_the_cloud_providers_does_not_mean_waiting(engine):
    # CriticalAddonsOnly (Kubernetes' taint for critical add-on nodes) sorts before the cloud provider's key
    obj = node(mode="cgpu", provider_id=None, taints=[{"key": "CriticalAddonsOnly", "effect": "NoSchedule"}])
    assert findings(engine, obj, rule="GN004")[0][1] == "deny"


@pytest.mark.parametrize("policy", ["none", "unspecified", "Static"])
def test_gn002_only_the_static_policy_is_refused(engine, policy):
    obj = relabel(node(mode="share"), **{"gpushare.io__cpu-manager-policy": policy})
    assert findings(engine, obj, rule="GN002") == []


def test_gn006_needs_the_cluster_state_and_is_skipped_without_it(engine):
    # `check` and /dry-run without a snapshot have no cluster state: the stateful rules are skipped, not failed
    old = node(mode="cgpu")
    assert findings(engine, with_mode(old, "share"), old=old, rule="GN006") == []


def test_only_gn006_of_the_node_rules_is_listed_as_needing_the_cluster_state(settings):
    # what `gpushare rules` marks "[needs --snapshot]" and `check` names as skipped without one
    from policies.rules.rule_index import rule_entries

    assert [e.id for e in rule_entries(settings) if e.id.startswith("GN") and e.stateful] == ["GN006"]
