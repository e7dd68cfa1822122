"""Tables the docs carry, generated from the code (``gpushare generate`` writes them): the custom
workload kinds (docs/workloads.md) and what an outage of each webhook blocks (docs/operations.md,
"What an outage blocks"). The rule tables come from the registry (``gpushare rules -o markdown``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.generate.match_conditions import SCOPES, WebhookScope, triggers
from policies.model.settings import PolicySettings
from policies.model.workloads import BUILT_IN, TEMPLATE

Obj = dict[str, Any]
# (mutating or validating, webhook) for every webhook of one install's rendered configurations.
Registrations = Sequence[tuple[str, Obj]]
WEBHOOK_CONFIGURATIONS = {"MutatingWebhookConfiguration": "mutating",
                          "ValidatingWebhookConfiguration": "validating"}


def kinds_table() -> str:
    """docs/workloads.md's table of kinds, from the built-in workload table."""
    rows = ["| kind | versions | pods at | checked against |", "|---|---|---|---|"]
    for kind in BUILT_IN:
        places = ", ".join(f"`{loc.text}`" + ("" if loc.shape is TEMPLATE else f" ({loc.shape.name})")
                           for loc in kind.locations)
        rows.append(f"| {kind.name} | {', '.join(kind.versions)} | {places} | {kind.source} |")
    return "\n".join(rows) + "\n"


def registrations(objects: Sequence[Obj]) -> list[tuple[str, Obj]]:
    """(mutating or validating, webhook) for every webhook of rendered configurations, in order."""
    return [(WEBHOOK_CONFIGURATIONS[o["kind"]], hook) for o in objects if o.get("kind") in WEBHOOK_CONFIGURATIONS
            for hook in o.get("webhooks", [])]


def outage_table(installs: Mapping[str, Registrations], settings: PolicySettings) -> str:
    """docs/operations.md's table: every webhook of every install (the base first, then each component's,
    keyed by the component's name), what it is sent, and what an outage of every replica does."""
    rows = ["| webhook | sent | `failurePolicy` | while every replica is down |", "|---|---|---|---|"]
    seen: set[str] = set()
    for install, hooks in installs.items():
        for _, hook in hooks:
            name = hook["name"]
            policies = {i: next((h["failurePolicy"] for _, h in installs[i] if h["name"] == name), None)
                        for i in installs}
            if name in seen:
                continue
            seen.add(name)
            where = "" if install == "base" else f" (component {install})"
            policy = hook["failurePolicy"]
            changed = [f"{p} with the {i} component" for i, p in policies.items() if p not in (None, policy)]
            shown = f"{policy}" + (f" ({'; '.join(changed)})" if changed else "")
            outcome = "refused" if policy == "Fail" else "admitted unjudged"
            if changed:
                outcome += " (admitted unjudged with the component)" if policy == "Fail" else " (refused with it)"
            rows.append(f"| `{name}`{where} | {_requests(hook)}: {_selected(name, hook, settings)} | {shown} "
                        f"| {outcome} |")
    return "\n".join(rows) + "\n"


def _requests(hook: Obj) -> str:
    parts = []
    for rule in hook.get("rules", []):
        ops = ", ".join(rule["operations"])
        parts.append(f"{ops} {', '.join(rule['resources'])}")
    return "; ".join(parts) if len(parts) < 4 else f"{', '.join(hook['rules'][0]['operations'])} of every kind of " \
                                                     f"the workload table ({len(parts)} resources)"


def _words(scope: WebhookScope, settings: PolicySettings) -> str:
    """What the scope's matchCondition selects, in words, from its declarations."""
    t = triggers(scope, settings)
    if scope.daemonsets:
        return "only the GPU-sharing DaemonSets and their pods, by name"
    shows = []
    if t.node_labels:
        shows.append(f"GPU nodes (labelled {' or '.join(f'`{k}`' for k in sorted(t.node_labels))}, now or before)")
        if "UPDATE" in scope.operations:
            shows.append("an UPDATE only when it changes a label or annotation a node rule reads (docs/design.md)")
    else:
        names = sorted(t.resources | t.custom_requests)
        if names:
            near = " or a near miss" if t.near_miss else ""
            shows.append(f"asking for {', '.join(f'`{n}`' for n in names)}{near}")
        if t.env:
            shows.append(f"setting one of {len(t.env)} variables the device plugin or cGPU owns")
        if t.placed_resources:
            shows.append("created on a node (`spec.nodeName`) with whole GPUs")
        if t.annotations:
            shows.append(f"carrying {', '.join(f'`{a}`' for a in sorted(t.annotations))}")
        if t.gpu_quotas:  # match_conditions._quota_condition: every UPDATE of such a quota is sent
            shows.append("naming a GPU resource (every ElasticQuotaTree: CEL cannot walk its tree)")
    text = "only those " + "; ".join(shows) if shows else "every request its rules match"
    if scope.controlled is not None:
        text += "; only those a controller made" if scope.controlled else "; none a controller made"
    if "UPDATE" in scope.operations and not t.node_labels and not t.gpu_quotas:
        text += "; an UPDATE only when it changes a judged part (docs/design.md) of an object not being deleted"
    return text


def _selected(name: str, hook: Obj, settings: PolicySettings) -> str:
    scope = next((s for s in SCOPES if s.name == name), None)
    if scope is not None:
        return _words(scope, settings)
    if hook.get("matchConditions"):
        return "what its matchCondition selects"
    return "every request its rules match (no matchCondition)"
