"""What makes an object worth sending to the webhook.

Each rule and mutation that judges objects declares what an object must show for it to have
anything to say (``Relevance``); under one configuration the declarations resolve to concrete
names (``Triggers``). The webhooks' matchConditions are generated from the union
(policies/generate/match_conditions.py), and ``Triggers.sends`` is the same test in Python, so a rule
added with its declaration is carried to the API server without anyone editing a manifest.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from policies.model.near_miss import near_misses, near_misses_in
from policies.model.resources import CONTAINER_GROUPS, CUSTOM_WORKLOADS, POD_SPEC_PATHS
from policies.model.settings import EnvNames, LabelNames, Names, PolicySettings, ResourceNames
from policies.model.workload_sites import patch_strings, pod_sites
from policies.model.workloads import WorkloadKind, group_of, workload_table
from policies.quota.quota_objects import QUOTA_KINDS, quota_sent
from policies.rules.judged import deleting, parts_for

_RESOURCE_FIELDS = frozenset(ResourceNames.model_fields)
_ENV_FIELDS = frozenset(EnvNames.model_fields)
_LABEL_FIELDS = frozenset(LabelNames.model_fields)
_NAME_FIELDS = frozenset(Names.model_fields)
_READ_SECTIONS = frozenset(("names", "nodes"))


@dataclass(frozen=True, slots=True)
class Relevance:
    """What an object must show for a rule or mutation to find anything (any one suffices).

    Names are settings fields, resolved per configuration: ``resources``, ``placed_resources``,
    ``env_from``, ``custom_requests`` and ``patch_mentions`` of ``names.resources``, ``annotations``
    of ``names``, ``node_labels`` of ``names.labels``, ``env_names`` of ``names.env``."""

    # A container or init container names one of these in its limits or requests.
    resources: tuple[str, ...] = ()
    # A container names a near miss of the shared-GPU names (GS007's definition, exactly).
    near_miss: bool = False
    # These resources count only on a pod created with spec.nodeName (it skips the scheduler, so
    # the placement rules judge it at creation).
    placed_resources: tuple[str, ...] = ()
    # The object, or its pod template, carries one of these annotation keys.
    annotations: tuple[str, ...] = ()
    # A container sets an env variable of one of these names (literal names).
    env: tuple[str, ...] = ()
    # A container sets an env variable named by one of these fields (a name or a list of names).
    env_names: tuple[str, ...] = ()
    # A container takes envFrom (whose names admission cannot see) and names one of these resources.
    env_from: tuple[str, ...] = ()
    # A Node carries one of these labels, now or before the update.
    node_labels: tuple[str, ...] = ()
    # One of the GPU-sharing DaemonSets (names.gpushare_daemonsets), or a pod one of them owns.
    gpushare_daemonsets: bool = False
    # A custom workload's container names one of these in its requests: the API server judges no
    # custom resource's pod templates, so what it refuses in a Pod (GS004) is sent for them.
    custom_requests: tuple[str, ...] = ()
    # A custom workload's pod spec patch strings (Argo's podSpecPatch) mention one of these names.
    patch_mentions: tuple[str, ...] = ()
    # Label and annotation keys the check reads besides its triggers, as dotted settings paths to a
    # name or a list of names ("names.labels.region", "nodes.mps_daemon_keys"): what else an UPDATE
    # must change for the rule to have anything new to say (policies/rules/judged.py). A node rule reads
    # each as a label or an annotation; other kinds' rules read them as annotations.
    reads: tuple[str, ...] = ()
    # A quota object (ResourceQuota, ElasticQuotaTree, ClusterQueue) that names a GPU resource
    # (policies/quota/quota_objects.py, ``names_gpu``).
    gpu_quotas: bool = False

    def __post_init__(self) -> None:
        resource_fields = {*self.resources, *self.placed_resources, *self.env_from, *self.custom_requests,
                           *self.patch_mentions}
        unknown = [*resource_fields - _RESOURCE_FIELDS, *set(self.node_labels) - _LABEL_FIELDS,
                   *set(self.annotations) - _NAME_FIELDS, *set(self.env_names) - _ENV_FIELDS]
        unknown += [r for r in self.reads if r.split(".", 1)[0] not in _READ_SECTIONS]
        if unknown:
            raise ValueError(f"relevance names unknown settings fields: {sorted(unknown)}")


# Nothing sent: the GA invariants (audit only), and GS004, whose findings the API server refuses itself
# before any webhook runs.
NOTHING = Relevance()


@dataclass(frozen=True, slots=True)
class Triggers:
    """The union of some declarations under one configuration, as concrete names."""

    resources: frozenset[str] = frozenset()
    near_miss: bool = False
    placed_resources: frozenset[str] = frozenset()
    annotations: frozenset[str] = frozenset()
    env: frozenset[str] = frozenset()
    node_labels: frozenset[str] = frozenset()
    gpushare_daemonsets: frozenset[str] = frozenset()
    env_from: frozenset[str] = frozenset()
    custom_requests: frozenset[str] = frozenset()
    patch_mentions: frozenset[str] = frozenset()
    # Keys read besides the triggers (``Relevance.reads``): they make nothing relevant, but an
    # UPDATE changing one is judged (policies/rules/judged.py).
    read_keys: frozenset[str] = frozenset()
    gpu_quotas: bool = False

    def __bool__(self) -> bool:
        return any((self.resources, self.near_miss, self.placed_resources, self.annotations, self.env,
                    self.node_labels, self.gpushare_daemonsets, self.env_from, self.custom_requests,
                    self.patch_mentions, self.gpu_quotas))

    def sends(self, kind: str, obj: dict[str, Any], settings: PolicySettings, *, operation: str = "CREATE",
              old: dict[str, Any] | None = None, group: str | None = None, sub_resource: str = "") -> bool:
        """Whether an object of ``kind`` shows any trigger: what the generated matchConditions answer.
        ``group`` is the object's API group (None: its apiVersion's); ``sub_resource``
        "ephemeralcontainers": an ephemeral container the old pod does not have sets a trigger name."""
        if sub_resource == "ephemeralcontainers":
            spec, before = _at(obj, ("spec", "ephemeralContainers")), _at(old, ("spec", "ephemeralContainers"))
            had = {c.get("name") for c in before if isinstance(c, dict) and isinstance(c.get("name"), str)} \
                if isinstance(before, list) else set()
            return isinstance(spec, list) and any(
                isinstance(c, dict) and not (isinstance(c.get("name"), str) and c["name"] in had)
                and _sets_env(c, self.env) for c in spec)
        workload = workload_table(settings).lookup(group_of(obj) if group is None else group, kind)
        # An UPDATE that changes no judged part, or of an object being deleted, is never sent; the
        # GPU-sharing DaemonSets' mutation (the only triggers naming them) is sent every UPDATE.
        if operation == "UPDATE" and old is not None and not self.gpushare_daemonsets:
            judged = parts_for(kind if workload is None else CUSTOM_WORKLOADS, self, settings)
            if deleting(obj) or judged.unchanged(obj, old):
                return False
        if workload is not None:
            return self._sends_workload(workload, obj, settings)
        if kind in QUOTA_KINDS:
            return self.gpu_quotas and quota_sent(kind, obj, settings.names)
        if kind == "Node":
            return _has_label(obj, self.node_labels) or _has_annotation(obj.get("metadata"), self.annotations) or (
                operation == "UPDATE" and old is not None and _has_label(old, self.node_labels))
        if kind == "DaemonSet" and _named(obj, self.gpushare_daemonsets):
            return True
        if kind == "Pod" and _owned_by(obj, self.gpushare_daemonsets):
            return True
        path = POD_SPEC_PATHS.get(kind)
        if path is None:
            return False
        spec = _at(obj, path)
        template_meta = _at(obj, (*path[:-1], "metadata"))
        if self.annotations and (_has_annotation(obj.get("metadata"), self.annotations)
                                 or _has_annotation(template_meta, self.annotations)):
            return True
        if not isinstance(spec, dict):
            return False
        containers = [c for group in CONTAINER_GROUPS if isinstance(spec.get(group), list)
                      for c in spec[group] if isinstance(c, dict)]
        if any(_names_resource(c, self.resources) or _sets_env(c, self.env)
               or (bool(c.get("envFrom")) and _names_resource(c, self.env_from)) for c in containers):
            return True
        if self.placed_resources and kind == "Pod" and spec.get("nodeName") \
                and any(_names_resource(c, self.placed_resources) for c in containers):
            return True
        return self.near_miss and bool(near_misses(spec, path, settings.names, settings.near_miss))

    def _sends_workload(self, workload: WorkloadKind, obj: dict[str, Any], settings: PolicySettings) -> bool:
        """A custom workload, read as its condition reads it: leniently (a value of an unexpected type
        holds nothing), its own metadata's annotations, every container of every pod location."""
        if self.annotations and _has_annotation(obj.get("metadata"), self.annotations):
            return True
        sites = [c for pod in pod_sites(workload, obj, strict=False) for c in pod.containers]
        if any(_names_resource(c.container, self.resources) or _sets_env(c.container, self.env)
               or (isinstance(c.container.get("envFrom"), list) and bool(c.container["envFrom"])
                   and _names_resource(c.container, self.env_from))
               or _requests(c.container, self.custom_requests) for c in sites):
            return True
        if self.near_miss and near_misses_in(((c.container, c.name, c.group, c.resources_path) for c in sites),
                                             settings.names, settings.near_miss):
            return True
        return bool(self.patch_mentions) and any(
            name in text for _, text in patch_strings(workload, obj, strict=False) for name in self.patch_mentions)


def resolve(declarations: Iterable[Relevance], settings: PolicySettings) -> Triggers:
    """The union of ``declarations`` under ``settings``, as concrete names."""
    names = settings.names
    resources: set[str] = set()
    placed: set[str] = set()
    annotations: set[str] = set()
    env: set[str] = set()
    env_from: set[str] = set()
    labels: set[str] = set()
    requested: set[str] = set()
    mentioned: set[str] = set()
    read: set[str] = set()
    near_miss = daemonsets = quotas = False
    for relevance in declarations:
        resources.update(getattr(names.resources, f) for f in relevance.resources)
        placed.update(getattr(names.resources, f) for f in relevance.placed_resources)
        annotations.update(getattr(names, f) for f in relevance.annotations)
        env.update(relevance.env)
        for f in relevance.env_names:
            named = getattr(names.env, f)
            env.update((named,) if isinstance(named, str) else named)
        env_from.update(getattr(names.resources, f) for f in relevance.env_from)
        labels.update(getattr(names.labels, f) for f in relevance.node_labels)
        requested.update(getattr(names.resources, f) for f in relevance.custom_requests)
        mentioned.update(getattr(names.resources, f) for f in relevance.patch_mentions)
        for dotted in relevance.reads:
            named = _setting(settings, dotted)
            read.update((named,) if isinstance(named, str) else named)
        near_miss |= relevance.near_miss
        daemonsets |= relevance.gpushare_daemonsets
        quotas |= relevance.gpu_quotas
    return Triggers(resources=frozenset(resources), near_miss=near_miss, placed_resources=frozenset(placed - resources),
                    annotations=frozenset(annotations), env=frozenset(env), node_labels=frozenset(labels),
                    gpushare_daemonsets=frozenset(names.gpushare_daemonsets) if daemonsets else frozenset(),
                    env_from=frozenset(env_from), custom_requests=frozenset(requested - resources),
                    patch_mentions=frozenset(mentioned), read_keys=frozenset(read),
                    gpu_quotas=quotas)


def _setting(settings: PolicySettings, dotted: str) -> Any:
    """The value at a dotted settings path: a name, or a list of names."""
    value: Any = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    if not isinstance(value, str) and not (isinstance(value, tuple | list) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"relevance reads {dotted}, which holds no label or annotation name")
    return value


def _at(obj: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _names_resource(container: dict[str, Any], names: frozenset[str]) -> bool:
    resources = container.get("resources")
    if not names or not isinstance(resources, dict):
        return False
    return any(isinstance(resources.get(s), dict) and not names.isdisjoint(resources[s])
               for s in ("limits", "requests"))


def _requests(container: dict[str, Any], names: frozenset[str]) -> bool:
    resources = container.get("resources")
    requests = resources.get("requests") if isinstance(resources, dict) else None
    return bool(names) and isinstance(requests, dict) and not names.isdisjoint(requests)


def _sets_env(container: dict[str, Any], names: frozenset[str]) -> bool:
    env = container.get("env")
    return bool(names) and isinstance(env, list) and any(isinstance(e, dict) and e.get("name") in names for e in env)


def _has_annotation(meta: Any, keys: frozenset[str]) -> bool:
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return bool(keys) and isinstance(annotations, dict) and not keys.isdisjoint(annotations)


def _has_label(obj: dict[str, Any], keys: frozenset[str]) -> bool:
    labels = _at(obj, ("metadata", "labels"))
    return bool(keys) and isinstance(labels, dict) and not keys.isdisjoint(labels)


def _named(obj: dict[str, Any], names: frozenset[str]) -> bool:
    return bool(names) and _at(obj, ("metadata", "name")) in names


def _owned_by(obj: dict[str, Any], daemonsets: frozenset[str]) -> bool:
    owners = _at(obj, ("metadata", "ownerReferences"))
    return bool(daemonsets) and isinstance(owners, list) and any(
        isinstance(o, dict) and o.get("kind") == "DaemonSet" and o.get("name") in daemonsets for o in owners)
