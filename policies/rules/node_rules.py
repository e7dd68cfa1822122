"""GN001-GN008: GPU scheduling modes on Node CREATE and UPDATE (ACK GPU-sharing pages, docs/design.md).

On UPDATE a rule judges only what the update changes: a node that already carries a bad
value is not held hostage on unrelated updates (the node lifecycle controller tainting
it, an operator adding a label), which would otherwise be denied forever.

What only a node needs (its record, the catalog, the version matrix, ECS ids) is imported when
the first node is judged: ``gpushare check`` on pods never loads it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import TYPE_CHECKING, cast

from policies.model.modes import ALL_MODES, CGPU_MODES, SHARED_MODES
from policies.model.resources import Path
from policies.model.settings import NodePolicySettings
from policies.model.subject import Subject
from policies.rules.base import Found, rule
from policies.rules.relevance import Relevance

if TYPE_CHECKING:
    from policies.model.catalog import Catalog
    from policies.model.cluster import NodeInfo
    from policies.model.ecs import EcsInstance

NODE = ("Node",)
# Every node rule judges a node that carries a GPU scheduling label, now or before the update.
GPU_SCHEDULING_LABELS = Relevance(node_labels=("schedule", "placement"))
# What else a rule reads, as a label or an annotation: an UPDATE changing it is judged; one changing
# neither it nor the mode labels is never sent (policies/rules/judged.py). spec.providerID is read too
# (GN003, GN004) but set once, by the cloud controller as the node registers: not sent on UPDATE.
READS_CPU_POLICY = Relevance(node_labels=("schedule", "placement"), reads=("names.labels.cpu_manager_policy",))
READS_REGION = Relevance(node_labels=("schedule", "placement"), reads=("names.labels.region",))
READS_MPS_DAEMON = Relevance(node_labels=("schedule", "placement"), reads=("nodes.mps_daemon_keys",))
PLACEMENTS = ("binpack", "spread")
# cGPU isolation runs only on ECS instances (ACK "Manage the shared GPU scheduling component");
# mps is built on cGPU too (policies/model/modes.py).
ECS_ONLY_MODES = CGPU_MODES
# Where the values of ack.node.gpu.schedule beyond the six of "GPU node scheduling labels" come from.
LABELS_PAGE = 'ACK documentation: "Labels for enabling GPU scheduling policies"'
DRA_PAGE = 'ACK documentation: "Schedule GPUs with DRA"'



def _node(subject: Subject) -> NodeInfo:
    if "node" not in subject.memo:
        from policies.model.cluster_manifests import node_from_manifest

        subject.memo["node"] = node_from_manifest(subject.obj, subject.names)
    return cast("NodeInfo", subject.memo["node"])


def _old_node(subject: Subject) -> NodeInfo | None:
    if subject.operation != "UPDATE" or not isinstance(subject.old, dict):
        return None
    if "old_node" not in subject.memo:
        from policies.model.cluster_manifests import node_from_manifest

        subject.memo["old_node"] = node_from_manifest(subject.old, subject.names)
    return cast("NodeInfo | None", subject.memo["old_node"])


def _changed(subject: Subject, fact: Callable[[NodeInfo], Hashable]) -> bool:
    """True on CREATE, and on UPDATE when ``fact`` of the node differs from the old node."""
    old = _old_node(subject)
    return old is None or fact(old) != fact(_node(subject))


def _mode(node: NodeInfo, subject: Subject) -> str:
    return node.labels.get(subject.names.labels.schedule, "")


def _policy(subject: Subject) -> NodePolicySettings:
    return subject.settings.nodes if subject.settings is not None else NodePolicySettings()


def _catalog(subject: Subject) -> Catalog:
    from policies.model.catalog import default_catalog

    return subject.catalog if subject.catalog is not None else default_catalog()


def _ecs(node: NodeInfo, subject: Subject) -> EcsInstance | None:
    """The node's ECS instance, from its spec.providerID; None when that is no ECS id."""
    from policies.model.ecs import ecs_instance

    return ecs_instance(node.provider_id, subject.names.ecs_provider_id_pattern)


def _label_path(key: str) -> Path:
    return ("metadata", "labels", key)


def region_of(node: NodeInfo, subject: Subject) -> str:
    """The region label, else the region part of an ECS provider ID (cn-beijing.i-..., with or
    without alicloud://)."""
    region = node.labels.get(subject.names.labels.region, "")
    if region:
        return region
    ecs = _ecs(node, subject)
    return ecs.region if ecs is not None else ""


@rule("GN001", severity="deny", seed=f"003, {LABELS_PAGE}, {DRA_PAGE}", kinds=NODE, relevance=GPU_SCHEDULING_LABELS,
      title="GPU scheduling and placement labels carry known values",
      doc="ack.node.gpu.schedule is one of the values ACK documents: default, cgpu, core_mem, share, mps, "
          "topology, mig (MIG partitioning) and disabled (GPUs left to DRA or another device plugin; mig and "
          "disabled nodes offer no shared GPU); ack.node.gpu.placement is binpack or spread and only means "
          "something with a shared mode.")
def known_mode_values(subject: Subject) -> Iterator[Found]:
    labels = subject.names.labels
    node = _node(subject)
    mode = _mode(node, subject)
    if labels.schedule in node.labels and mode not in ALL_MODES and _changed(subject, lambda n: _mode(n, subject)):
        yield Found(f"Node {node.name}: {labels.schedule}={mode!r} is not a GPU scheduling mode; use one of "
                    f"{', '.join(sorted(ALL_MODES))}", _label_path(labels.schedule))
    placement = node.labels.get(labels.placement)
    if placement is None or not _changed(subject, lambda n: (_mode(n, subject), n.labels.get(labels.placement))):
        return
    if placement not in PLACEMENTS:
        yield Found(f"Node {node.name}: {labels.placement}={placement!r} is not a placement policy; use binpack "
                    f"(the default) or spread", _label_path(labels.placement))
    elif mode not in SHARED_MODES:
        shown = mode or "unset (exclusive)"
        yield Found(f"Node {node.name}: {labels.placement}={placement} has no effect with {labels.schedule}={shown}; "
                    f"it applies only to the shared modes {', '.join(sorted(SHARED_MODES))}",
                    _label_path(labels.placement), advisory=True)


def _cpu_policy(node: NodeInfo, subject: Subject) -> tuple[str, str]:
    """The node's CPU manager policy and where it was read ("labels", "annotations", "kubelet").

    The label or annotation on the object under review wins; else what the node's kubelet
    reported through /configz, which the live state holds (opt-in, state.kubelet_configz).
    """
    key = subject.names.labels.cpu_manager_policy
    for where, values in (("labels", node.labels), ("annotations", node.annotations)):
        if values.get(key):
            return values[key], where
    known = subject.state.get_node(node.name) if subject.state is not None else None
    if known is not None and known.kubelet_cpu_manager_policy:
        return known.kubelet_cpu_manager_policy, "kubelet"
    return "", ""


@rule("GN002", severity="deny", seed="001, 002", kinds=NODE, relevance=READS_CPU_POLICY,
      title="No shared GPU mode on a node with the static CPU manager policy",
      doc="Shared GPU scheduling does not support the kubelet's static CPU manager policy. The policy is "
          "read from the node's label or annotation, else (opt-in) from its kubelet's /configz.")
def no_shared_mode_with_static_cpu(subject: Subject) -> Iterator[Found]:
    node = _node(subject)
    mode = _mode(node, subject)
    names = subject.names
    key = names.labels.cpu_manager_policy
    if mode not in SHARED_MODES:
        return
    policy, where = _cpu_policy(node, subject)
    schedule_path = _label_path(names.labels.schedule)
    if not policy:
        if _changed(subject, lambda n: _mode(n, subject)):
            configz = subject.settings is not None and subject.settings.state.kubelet_configz.enabled
            how = ("and its kubelet's /configz has not been read or could not be (see the gpushare_kubelet_"
                   "configz metrics and the log)" if configz else
                   "and reading it from the kubelet's /configz is off (state.kubelet_configz.enabled)")
            yield Found(f"Node {node.name}: {names.labels.schedule}={mode}: the node's CPU manager policy is "
                        f"unknown (no {key} label or annotation, {how}), so whether it is static, which shared GPU "
                        f"scheduling does not support, cannot be checked; publish it as {key} "
                        f"(docs/state.md, \"CPU manager policy\")", schedule_path, advisory=True)
        return
    if policy != "static":
        return
    if _changed(subject, lambda n: (_mode(n, subject), _cpu_policy(n, subject))):
        shown = f"{key}=static" if where != "kubelet" else "its kubelet's /configz says cpuManagerPolicy: static"
        path = ("metadata", where, key) if where != "kubelet" else schedule_path
        yield Found(f"Node {node.name}: {names.labels.schedule}={mode} on a node whose CPU manager policy is "
                    f"static ({shown}); shared GPU scheduling needs policy none, or use "
                    f"{names.labels.schedule}=default", path)


@rule("GN003", severity="deny", seed="000, 002", kinds=NODE, relevance=READS_REGION,
      title="The mode is available in the node's region",
      doc="cgpu and mps need a region with GPU memory isolation; core_mem a region with "
          "computing power allocation; share works in any region.")
def mode_available_in_region(subject: Subject) -> Iterator[Found]:
    node = _node(subject)
    mode = _mode(node, subject)
    allowed = _catalog(subject).regions_for(mode)
    if allowed is None or not _changed(subject, lambda n: (_mode(n, subject), region_of(n, subject))):
        return
    region = region_of(node, subject)
    path = _label_path(subject.names.labels.schedule)
    listed = ", ".join(sorted(allowed))
    if not region:
        yield Found(f"Node {node.name}: {subject.names.labels.schedule}={mode} but the node shows no region "
                    f"({subject.names.labels.region} label or ECS provider ID), so it cannot be checked; "
                    f"{mode} works in {listed}", path, advisory=True)
    elif region not in allowed:
        regions = {m: _catalog(subject).regions_for(m) for m in sorted(SHARED_MODES) if m != mode}
        other = [m for m, listed_for in regions.items() if listed_for is None or region in listed_for]
        hint = f"; in {region} use {' or '.join(other)}" if other else ""
        yield Found(f"Node {node.name}: {subject.names.labels.schedule}={mode} is not available in region {region}; "
                    f"{mode} works in {listed}{hint}", path)


@rule("GN004", severity="deny", seed="002", kinds=NODE, relevance=GPU_SCHEDULING_LABELS,
      title="cgpu, core_mem and mps only on ECS nodes",
      doc="cGPU memory isolation works only on ECS instances: a node whose spec.providerID is not an "
          "ECS id (REGION.INSTANCEID such as cn-hangzhou.i-bp16uimj7fl6ze8q5rf3, bare or behind "
          "alicloud://) must not carry cgpu, core_mem or mps.")
def isolation_only_on_ecs(subject: Subject) -> Iterator[Found]:
    node = _node(subject)
    mode = _mode(node, subject)
    if mode not in ECS_ONLY_MODES or not _changed(subject, lambda n: (_mode(n, subject), n.provider_id)):
        return
    if _ecs(node, subject) is not None:
        return
    path = _label_path(subject.names.labels.schedule)
    taint = _policy(subject).uninitialized_taint
    spec = subject.obj.get("spec")
    taints = spec.get("taints") if isinstance(spec, dict) else None
    waiting = not node.provider_id and isinstance(taints, list) and any(
        isinstance(t, dict) and t.get("key") == taint for t in taints)
    if waiting:
        yield Found(f"Node {node.name}: {subject.names.labels.schedule}={mode} needs an ECS node, and the cloud "
                    f"provider has not set spec.providerID yet ({taint}); it is checked again when it does",
                    path, advisory=True)
        return
    shown = node.provider_id or "empty"
    yield Found(f"Node {node.name}: {subject.names.labels.schedule}={mode} needs an ECS node (spec.providerID "
                f"REGION.INSTANCEID, e.g. cn-hangzhou.i-bp16uimj7fl6ze8q5rf3, bare or behind alicloud://), but "
                f"spec.providerID is {shown}; use {subject.names.labels.schedule}=share on non-ECS nodes", path)


@rule("GN005", severity="deny", seed=f"000, 002, 003, {LABELS_PAGE}", kinds=NODE, relevance=GPU_SCHEDULING_LABELS,
      operations=("UPDATE",),
      title="No GPU mode switched by relabelling an existing node",
      doc="Computing power allocation does not work when an existing node is labelled core_mem: "
          "denied, add the node to a core_mem node pool instead. Changing a shared GPU scheduling label "
          "(cgpu, core_mem, share, mps) to another shared mode warns, in the words of \"Manage the shared "
          "GPU scheduling component\" (after adding it, do not change it with kubectl label nodes). Setting "
          "default, which \"GPU node scheduling labels\" tells users to do with kubectl label --overwrite, "
          "and labelling a node that had no shared mode pass. Changing mig to another value warns: \"Labels "
          "for enabling GPU scheduling policies\" supports no other value for it. Nodes created with the label, "
          "and the configured node-pool identities, may.")
def no_core_mem_by_relabel(subject: Subject) -> Iterator[Found]:
    old = _old_node(subject)
    node = _node(subject)
    if old is None:
        return
    before, after = _mode(old, subject), _mode(node, subject)
    policy = _policy(subject)
    if before == after or subject.user.username in policy.node_pool_users \
            or set(subject.user.groups) & set(policy.node_pool_groups):
        return
    schedule = subject.names.labels.schedule
    if before == "mig" and after:
        yield Found(f"Node {node.name}: {schedule} mig -> {after}: \"Labels for enabling GPU scheduling policies\" "
                    f"supports no other value on a mig node; use a node pool labelled {after}", _label_path(schedule),
                    advisory=True)
    if after != "core_mem":
        # "Manage the shared GPU scheduling component": "After adding the shared GPU scheduling label, do
        # not use the kubectl label nodes command to change the GPU scheduling label". "GPU node
        # scheduling labels" tells users to set default with kubectl label --overwrite (leaving a shared
        # mode or topology), so that, and a node that had no shared label, pass; removing one is GN006's.
        if before in SHARED_MODES and after in SHARED_MODES:
            yield Found(f"Node {node.name}: {schedule} {before} -> {after}: after adding a shared GPU scheduling "
                        f"label, do not change it with kubectl label (\"Manage the shared GPU scheduling "
                        f"component\"); use a node pool labelled {after}", _label_path(schedule), advisory=True)
        return
    before = _mode(old, subject) or "unset"
    who = subject.user.username or "an unnamed user"
    identities = [*policy.node_pool_users, *(f"group {g}" for g in policy.node_pool_groups)]
    allowed = ", ".join(identities) or "none configured"
    yield Found(f"Node {node.name}: {subject.names.labels.schedule} {before} -> core_mem by {who} relabels an existing "
                f"node, which does not enable computing power allocation; remove the node and add it to a node pool "
                f"labelled core_mem (node-pool identities allowed to relabel: {allowed})",
                _label_path(subject.names.labels.schedule))


@rule("GN006", severity="deny", kinds=NODE, relevance=GPU_SCHEDULING_LABELS,
      seed="project choice: a mode change under running GPU pods breaks them; ACK only advises against it",
      operations=("UPDATE",), stateful=True,
      title="The mode does not change under running GPU pods",
      doc="Project choice, for safety: the ACK pages only warn against relabelling existing nodes, but "
          "changing ack.node.gpu.schedule under running GPU pods withdraws the resources they were "
          "placed with (a node runs one mode; the others' resources drop to 0), so it is denied until "
          "the node is drained. Removing the label warns: it does not restore exclusive mode (use "
          "default).")
def no_mode_change_under_pods(subject: Subject) -> Iterator[Found]:
    old = _old_node(subject)
    node = _node(subject)
    if old is None:
        return
    schedule = subject.names.labels.schedule
    before, after = _mode(old, subject), _mode(node, subject)
    if before == after:
        return
    path = _label_path(schedule)
    if schedule not in node.labels and before not in ("", "default"):
        yield Found(f"Node {node.name}: removing {schedule}={before} does not restore exclusive GPU scheduling; set "
                    f"{schedule}=default explicitly", path, advisory=True)
    shown_before, shown_after = before or "unset", after or "unset"
    state = subject.usable_state("node_mode_change",
                                 f"Node {node.name}: {schedule} {shown_before} -> {shown_after} could not be "
                                 f"checked for running GPU pods")
    running = sorted(p.key for p in state.pods_on_node(node.name) if p.uses_gpu and not p.terminated)
    if running:
        shown = ", ".join(running[:5]) + (f" and {len(running) - 5} more" if len(running) > 5 else "")
        yield Found(f"Node {node.name}: {schedule} {shown_before} -> {shown_after} while {len(running)} GPU pod(s) run "
                    f"on it ({shown}); drain the node first, then change the mode (accepted: {schedule}={shown_before} "
                    f"until no GPU pods run there)", path)


@rule("GN007", severity="deny", seed="002", kinds=NODE, relevance=GPU_SCHEDULING_LABELS,
      title="Node components fit the cGPU version matrix",
      doc="Enabling cgpu, core_mem or mps checks kubelet, container runtime, OS image, NVIDIA driver "
          "and GPU series against the cGPU version matrix: known-incompatible values are denied, "
          "values the node does not show or the matrix does not know are warned about.")
def components_fit_matrix(subject: Subject) -> Iterator[Found]:
    node = _node(subject)
    mode = _mode(node, subject)
    matrix = _catalog(subject).versions
    if mode not in matrix.modes or not _changed(subject, lambda n: _mode(n, subject)):
        return
    from policies.model.compatibility import node_mismatches

    found = node_mismatches(node, mode, matrix, subject.names, _policy(subject).driver_version_labels)
    path = _label_path(subject.names.labels.schedule)
    bad = [m for m in found if m.status == "incompatible"]
    unknown = [m for m in found if m.status == "unknown"]
    if bad:
        yield Found(f"Node {node.name}: {subject.names.labels.schedule}={mode} on incompatible components: "
                    + "; ".join(m.message for m in bad), path)
    if unknown:
        yield Found(f"Node {node.name}: {subject.names.labels.schedule}={mode}: could not confirm "
                    f"{', '.join(m.component for m in unknown)} against the version matrix: "
                    + "; ".join(m.message for m in unknown), path, advisory=True)


def shows_mps_daemon(node: NodeInfo, keys: tuple[str, ...]) -> bool:
    for key in keys:
        value = node.labels.get(key, node.annotations.get(key))
        if value is not None and value.lower() != "false":
            return True
    return False


@rule("GN008", severity="warn", seed="003", kinds=NODE, relevance=READS_MPS_DAEMON,
      title="mps nodes show the MPS control daemon",
      doc="The mps mode needs the MPS Control Daemon component; warn when the node does not show it.")
def mps_needs_daemon(subject: Subject) -> Iterator[Found]:
    node = _node(subject)
    keys = _policy(subject).mps_daemon_keys
    if _mode(node, subject) != "mps" or not keys:
        return
    if shows_mps_daemon(node, keys) or not _changed(subject, lambda n: (_mode(n, subject),
                                                                          shows_mps_daemon(n, keys))):
        return
    yield Found(f"Node {node.name}: {subject.names.labels.schedule}=mps but the node does not show the MPS control "
                f"daemon (label or annotation {' or '.join(keys)}); install the MPS Control Daemon component",
                _label_path(subject.names.labels.schedule))
