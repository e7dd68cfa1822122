"""GN001-GN008 on Node CREATE and UPDATE, with the values of seeds 000-003."""

from __future__ import annotations

import pytest

from policies.admission.engine import Engine
from policies.model.cluster_manifests import node_from_manifest, pod_from_manifest
from policies.model.cluster_snapshot import ClusterSnapshot
from policies.model.subject import UserInfo
from tests.support.cluster_objects import gpu_pod, node, relabel, with_mode
from webhook.settings import Settings


def judge(engine: Engine, obj, *, old=None, user: UserInfo | None = None, state=None):
    operation = "UPDATE" if old is not None else "CREATE"
    return engine.validate(engine.subject("Node", obj, operation=operation, old=old, user=user, state=state))


def by_rule(verdict, rule_id: str):
    return [f for f in verdict.findings if f.rule == rule_id]


def test_a_seed_cgpu_node_passes(engine):
    verdict = judge(engine, node(mode="cgpu", region="cn-hangzhou"))
    assert verdict.findings == []


def test_gn001_unknown_mode_and_placement(engine):
    verdict = judge(engine, relabel(node(mode="cGPU"), **{"ack.node.gpu.placement": "pack"}))
    messages = [f.message for f in by_rule(verdict, "GN001")]
    assert messages == [
        "GN001: Node cn-beijing.192.168.1.10: ack.node.gpu.schedule='cGPU' is not a GPU scheduling mode; use one of "
        "cgpu, core_mem, default, disabled, mig, mps, share, topology",
        "GN001: Node cn-beijing.192.168.1.10: ack.node.gpu.placement='pack' is not a placement policy; use binpack "
        "(the default) or spread"]
    assert not verdict.allowed


def test_gn001_placement_without_shared_mode_warns(engine):
    verdict = judge(engine, relabel(node(mode="topology"), **{"ack.node.gpu.placement": "spread"}))
    [finding] = by_rule(verdict, "GN001")
    assert finding.severity == "warn" and verdict.allowed
    assert "has no effect with ack.node.gpu.schedule=topology" in finding.message


def _kubelet_reported(settings, obj, policy: str) -> ClusterSnapshot:
    """The live state after the opt-in /configz reader found ``policy`` on the node's kubelet."""
    from dataclasses import replace

    state = ClusterSnapshot()
    state.upsert_node(replace(node_from_manifest(obj, settings.names), kubelet_cpu_manager_policy=policy))
    return state


def test_gn002_reads_the_kubelets_policy_from_the_state_and_the_label_wins(engine, settings):
    old = node(mode="default")
    del old["metadata"]["labels"]["gpushare.io/cpu-manager-policy"]
    change = with_mode(old, "share")
    [finding] = by_rule(judge(engine, change, old=old, state=_kubelet_reported(settings, old, "static")), "GN002")
    assert finding.severity == "deny"
    assert "(its kubelet's /configz says cpuManagerPolicy: static)" in finding.message
    assert finding.path_text == 'metadata.labels["ack.node.gpu.schedule"]'
    assert by_rule(judge(engine, change, old=old, state=_kubelet_reported(settings, old, "none")), "GN002") == []
    [unknown] = by_rule(judge(engine, change, old=old, state=_kubelet_reported(settings, old, "")), "GN002")
    assert unknown.severity == "warn" and "CPU manager policy is unknown" in unknown.message
    labelled_old = relabel(old, **{"gpushare.io__cpu-manager-policy": "none"})
    labelled = with_mode(labelled_old, "share")
    assert by_rule(judge(engine, labelled, old=labelled_old,
                         state=_kubelet_reported(settings, old, "static")), "GN002") == []


def test_gn001_does_not_block_unrelated_updates_of_a_node_with_a_bad_label(engine):
    old = node(mode="bogus")
    new = relabel(old, **{"team": "vision"})
    new["spec"]["taints"] = [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    assert judge(engine, new, old=old).findings == []


def test_gn002_static_cpu_policy(engine):
    obj = relabel(node(mode="share", region=None, provider_id=None), **{"gpushare.io__cpu-manager-policy": "static"})
    [finding] = by_rule(judge(engine, obj), "GN002")
    assert finding.severity == "deny"
    assert "CPU manager policy is static (gpushare.io/cpu-manager-policy=static)" in finding.message
    assert finding.path_text == 'metadata.labels["gpushare.io/cpu-manager-policy"]'
    # exclusive mode on a static node is fine
    assert by_rule(judge(engine, with_mode(obj, "default")), "GN002") == []


@pytest.mark.parametrize(("mode", "region", "allowed"), [
    ("core_mem", "eu-central-1", False),     # not in seed 000's compute-allocation list
    ("cgpu", "eu-central-1", True),          # in seed 002's memory-isolation list
    ("mps", "eu-central-1", True),
    ("core_mem", "ap-southeast-7", True),    # seed 000 lists Bangkok
    ("cgpu", "ap-southeast-7", False),       # seed 002 does not
    ("core_mem", "cn-wulanchabu", False),    # only in 002
    ("cgpu", "cn-wulanchabu", True),
    ("core_mem", "cn-shanghai-finance-1", True),
    ("share", "eu-west-1", True),            # share works anywhere
])
def test_gn003_regions_per_mode(engine, mode, region, allowed):
    obj = node(mode=mode, region=region, provider_id=f"alicloud://{region}.i-abc")
    found = by_rule(judge(engine, obj), "GN003")
    assert (found == []) is allowed
    if not allowed:
        assert f"{mode} is not available in region {region}" in found[0].message
        assert found[0].severity == "deny"


def test_gn003_names_the_modes_that_work_in_the_region(engine):
    [finding] = by_rule(judge(engine, node(mode="core_mem", region="eu-central-1")), "GN003")
    assert finding.message.endswith("; in eu-central-1 use cgpu or mps or share")


def test_gn003_region_from_provider_id_and_unknown_region_warns(engine):
    obj = node(mode="core_mem", region=None, provider_id="alicloud://eu-central-1.i-gw8abc")
    assert "region eu-central-1" in by_rule(judge(engine, obj), "GN003")[0].message
    [unknown] = by_rule(judge(engine, node(mode="cgpu", region=None, provider_id="alicloud://i-noregion")), "GN003")
    assert unknown.severity == "warn" and "shows no region" in unknown.message


@pytest.mark.parametrize("mode", ["cgpu", "core_mem", "mps"])
def test_gn004_isolation_needs_an_ecs_provider_id(engine, mode):
    obj = node(mode=mode, provider_id="kind://docker/kind/worker")
    [finding] = by_rule(judge(engine, obj), "GN004")
    assert finding.severity == "deny"
    assert ("needs an ECS node (spec.providerID REGION.INSTANCEID, e.g. cn-hangzhou.i-bp16uimj7fl6ze8q5rf3, bare "
            "or behind alicloud://), but spec.providerID is kind://docker/kind/worker; use "
            "ack.node.gpu.schedule=share on non-ECS nodes") in finding.message
    assert by_rule(judge(engine, node(mode=mode)), "GN004") == []
    assert by_rule(judge(engine, node(mode="share", provider_id=None)), "GN004") == []


def test_gn004_waits_for_the_cloud_provider(engine):
    taint = [{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]
    [finding] = by_rule(judge(engine, node(mode="cgpu", provider_id=None, taints=taint)), "GN004")
    assert finding.severity == "warn"
    [denied] = by_rule(judge(engine, node(mode="cgpu", provider_id=None)), "GN004")
    assert denied.severity == "deny" and "spec.providerID is empty" in denied.message


def test_gn005_core_mem_by_relabel_is_denied_but_created_nodes_pass(engine):
    old = node(mode="cgpu")
    verdict = judge(engine, with_mode(old, "core_mem"), old=old, user=UserInfo("alice", ("system:authenticated",)))
    [finding] = by_rule(verdict, "GN005")
    assert finding.message.startswith(
        "GN005: Node cn-beijing.192.168.1.10: ack.node.gpu.schedule cgpu -> core_mem by alice relabels an existing "
        "node")
    assert "add it to a node pool labelled core_mem" in finding.message
    assert by_rule(judge(engine, node(mode="core_mem")), "GN005") == []
    # already core_mem: an unrelated update passes
    same = node(mode="core_mem")
    assert by_rule(judge(engine, relabel(same, team="a"), old=same), "GN005") == []


def test_gn005_node_pool_identities_may_relabel():
    settings = Settings(nodes={"node_pool_users": ["system:serviceaccount:kube-system:nodepool-controller"],
                               "node_pool_groups": ["ack:nodepool"]})
    engine = Engine(settings)
    old = node(mode="cgpu")
    new = with_mode(old, "core_mem")
    assert by_rule(judge(engine, new, old=old, user=UserInfo("system:serviceaccount:kube-system:nodepool-controller")),
                   "GN005") == []
    assert by_rule(judge(engine, new, old=old, user=UserInfo("bob", ("ack:nodepool",))), "GN005") == []
    denied = by_rule(judge(engine, new, old=old, user=UserInfo("bob", ("dev",))), "GN005")
    assert "system:serviceaccount:kube-system:nodepool-controller, group ack:nodepool" in denied[0].message


def _state_with(settings, node_obj, *pods):
    state = ClusterSnapshot()
    state.upsert_node(node_from_manifest(node_obj, settings.names))
    for pod in pods:
        state.record_pod(pod_from_manifest(pod, settings.names))
    return state


def test_gn006_mode_change_with_running_shared_gpu_pods_is_denied(engine, settings):
    old = node(mode="cgpu")
    pods = [gpu_pod(f"infer-{i}", mem=2, node_name=old["metadata"]["name"]) for i in range(7)]
    state = _state_with(settings, old, *pods, gpu_pod("done", node_name=old["metadata"]["name"], phase="Succeeded"))
    [finding] = by_rule(judge(engine, with_mode(old, "share"), old=old, state=state), "GN006")
    assert finding.severity == "deny"
    assert ("ack.node.gpu.schedule cgpu -> share while 7 GPU pod(s) run on it (default/infer-0, default/infer-1, "
            "default/infer-2, default/infer-3, default/infer-4 and 2 more); drain the node first") in finding.message
    # the same change on an empty node passes
    empty = _state_with(settings, old)
    assert by_rule(judge(engine, with_mode(old, "share"), old=old, state=empty), "GN006") == []


def test_gn006_removing_the_label_warns(engine, settings):
    old = node(mode="cgpu")
    verdict = judge(engine, with_mode(old, None), old=old, state=_state_with(settings, old))
    [finding] = by_rule(verdict, "GN006")
    assert finding.severity == "warn" and "set ack.node.gpu.schedule=default explicitly" in finding.message


def test_gn006_without_state_fails_closed_with_a_reason(engine, settings):
    class Unsynced(ClusterSnapshot):
        def availability(self):
            from policies.model.cluster import Availability
            return Availability(False, "not synced yet")

    old = node(mode="cgpu")
    [finding] = by_rule(judge(engine, with_mode(old, "share"), old=old, state=Unsynced()), "GN006")
    assert finding.severity == "deny"
    assert "the cluster state is not usable (not synced yet); denied (state.when_unavailable.node_mode_change: " \
           "closed)" in finding.message
    open_engine = Engine(Settings(state={"when_unavailable": {"node_mode_change": "open"}}))
    [warned] = by_rule(judge(open_engine, with_mode(old, "share"), old=old, state=Unsynced()), "GN006")
    assert warned.severity == "warn" and "admitted without the check" in warned.message


@pytest.mark.parametrize(("changes", "component", "severity", "text"), [
    ({"runtime": "containerd://1.4.2"}, "containerd", "deny", "containerd 1.4.2 is older than 1.4.3"),
    ({"runtime": "containerd://1.4.3"}, None, None, None),
    ({"runtime": "docker://19.3.4"}, "docker", "deny", "docker 19.3.4 is older than 19.03.5"),
    ({"runtime": "docker://19.3.15"}, None, None, None),
    ({"runtime": "cri-o://1.28.1"}, "container runtime", "warn", "container runtime cri-o://1.28.1 is not in the"),
    ({"driver": "418.67"}, "NVIDIA driver", "deny", "NVIDIA driver 418.67 is older than 418.87.01"),
    ({"driver": "418.87.01"}, None, None, None),
    ({"driver": None}, "NVIDIA driver", "warn", "NVIDIA driver version not shown"),
    ({"card_name": "Tesla-T4"}, None, None, None),
    ({"card_name": "NVIDIA-H800"}, None, None, None),
    ({"card_name": "NVIDIA-L20"}, "GPU", "deny", "GPU NVIDIA-L20 is L-series, not supported"),
    ({"card_name": "GeForce-RTX-4090"}, "GPU", "warn", "has no series the matrix knows"),
    ({"os_image": "Ubuntu 22.04.4 LTS"}, None, None, None),
    ({"os_image": "Ubuntu 20.04.6 LTS"}, "OS image", "deny", "is not a supported Ubuntu release (supported: 22.04)"),
    # One page's node is not denied by the other page's table: warned, naming both pages.
    ({"os_image": "Ubuntu 18.04.6 LTS"}, "OS image", "warn",
     "OS image 'Ubuntu 18.04.6 LTS' is not in the cGPU version matrix of \"Manage the shared GPU scheduling "
     "component\" (22.04), but \"Shared GPU scheduling in registered clusters\" supports Ubuntu 16.04, 18.04 for its "
     "nodes"),
    ({"os_image": "Ubuntu 16.04.7 LTS"}, "OS image", "warn", "supports Ubuntu 16.04, 18.04 for its nodes"),
    ({"os_image": "CentOS Linux 7 (Core)"}, "OS image", "warn", "does not show which CentOS release"),
    ({"os_image": "CentOS Linux release 7.8.2003"}, "OS image", "deny", "not a supported CentOS release"),
    ({"os_image": "Alibaba Cloud Linux (Aliyun Linux) 2.1903 LTS (Hunting Beagle)"}, None, None, None),
    ({"os_image": "Debian GNU/Linux 12 (bookworm)"}, "OS image", "warn", "is not in the matrix"),
    ({"kubelet": "v1.18.8-aliyun.1", "mode": "core_mem"}, "kubelet", "deny", "kubelet v1.18.8-aliyun.1 is older "
                                                                             "than 1.20"),
])
def test_gn007_version_matrix(engine, changes, component, severity, text):
    mode = changes.pop("mode", "cgpu")
    verdict = judge(engine, node(mode=mode, **changes))
    found = by_rule(verdict, "GN007")
    if component is None:
        assert found == []
        return
    [finding] = found
    assert finding.severity == severity and text in finding.message


def test_gn007_only_when_the_mode_is_enabled(engine):
    old = node(mode="cgpu", runtime="containerd://1.4.2")
    assert by_rule(judge(engine, relabel(old, team="a"), old=old), "GN007") == []
    share = node(mode="share", runtime="containerd://1.4.2")
    assert by_rule(judge(engine, with_mode(share, "mps"), old=share), "GN007")[0].severity == "deny"


def test_gn007_matrix_is_overridable_by_config(tmp_path):
    engine = Engine(Settings(catalog={"versions": {"container_runtime": {"containerd": "1.7.0"}},
                                      "regions": {"core_mem": ["eu-central-1"]}}))
    verdict = judge(engine, node(mode="core_mem", region="eu-central-1", runtime="containerd://1.6.20"))
    assert by_rule(verdict, "GN003") == []
    assert "containerd 1.6.20 is older than 1.7.0" in by_rule(verdict, "GN007")[0].message
    override = tmp_path / "catalog.yaml"
    override.write_text("regions:\n  cgpu: [cn-beijing]\n")
    engine = Engine(Settings(catalog={"file": str(override)}))
    assert by_rule(judge(engine, node(mode="cgpu", region="cn-hangzhou")), "GN003")[0].severity == "deny"


def test_gn008_mps_without_the_daemon_warns(engine):
    [finding] = by_rule(judge(engine, node(mode="mps")), "GN008")
    assert finding.severity == "warn" and "install the MPS Control Daemon component" in finding.message
    shown = node(mode="mps", labels={"gpushare.io/mps-control-daemon": "true"})
    assert by_rule(judge(engine, shown), "GN008") == []


@pytest.mark.processes
def test_a_broken_catalog_override_is_refused_at_start(tmp_path):
    import subprocess

    from policies.model.catalog import CatalogError
    from tests.support.helpers import gpushare_executable

    bad = {"versions": {"os_images": [{"family": "X", "match": "(unclosed", "supported": ["1"]}]}}
    with pytest.raises(CatalogError, match="not a regular expression"):
        Engine(Settings(catalog=bad))
    config = tmp_path / "gpushare.yaml"
    config.write_text("catalog:\n  regions:\n    cgpu: 42\n")
    result = subprocess.run([gpushare_executable(), "serve", "--config", str(config), "--cert-dir",
                             str(tmp_path / "c"), "--port", "0"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "gpushare.yaml" in result.stderr and "catalog.regions.cgpu" in result.stderr


def test_the_shipped_catalog_is_read_at_first_use_or_when_the_server_starts():
    from policies.model.catalog import default_catalog
    from webhook.serving import build_services

    offline = Engine(Settings())
    assert offline.catalog is None  # gpushare check on pods never reads it
    [refused] = by_rule(judge(offline, node(mode="cgpu", region="ap-southeast-7")), "GN003")
    assert "cgpu works in ap-northeast-1, ap-southeast-1" in refused.message  # the shipped list, read now
    offline.warm()
    assert offline.catalog is default_catalog()
    assert build_services(Settings(), None).engine.catalog is default_catalog()  # before any review
