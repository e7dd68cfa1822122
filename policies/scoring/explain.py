"""Why is this GPU pod Pending: every node with the reason it does not fit, the node that
comes closest, and what would have to change there.

The ranking is the scoring engine's (``Scorer.rank``) and every reason is worded as
``/dry-run`` words it (``ranking_entry``): the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from policies.model.cluster import ClusterState, PodInfo
from policies.model.selectors import NodeSelector
from policies.model.settings import Names
from policies.placement.cards import CORE_PER_CARD
from policies.placement.placement import PodDemand
from policies.scoring.scoring import NodeScore, PodRequest, Scorer, ranking_entry


@dataclass
class Explanation:
    pod: str  # namespace/name
    node: str  # the node it is bound to, "" while Pending
    phase: str
    summary: str
    ranking: list[dict[str, Any]] = field(default_factory=list)
    fitting: list[str] = field(default_factory=list)
    closest: str = ""
    changes: list[str] = field(default_factory=list)
    # The quotas that hold the pod back whatever the nodes have (an ElasticQuotaTree node's max).
    quota: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"pod": self.pod, "node": self.node or None, "phase": self.phase, "summary": self.summary,
                "fitting": self.fitting, "closest": self.closest or None, "changes": self.changes,
                "quota": self.quota, "ranking": self.ranking}


def quota_holds(pod: PodInfo, state: ClusterState, names: Names) -> list[str]:
    """Why the pod waits on its namespace's ElasticQuotaTree: each quota node on its path whose max has less
    left than the pod needs (ACK "Work with capacity scheduling": a pod is scheduled if its requests added to
    the node's usage stay within max). The pod itself is not counted: it is not placed."""
    objects = getattr(state, "quota_objects", None)
    quotas = objects() if objects is not None else []
    if not quotas:
        return []
    import time

    from policies.model.pod_usage import usage_of
    from policies.quota.quota_objects import ELASTIC_QUOTA_TREE
    from policies.quota.quota_usage import quota_limits

    pods = getattr(state, "pods", None)
    held = []
    for limit in quota_limits(pod.namespace, quotas, usage_of(pods() if pods is not None else []), names,
                              time.time()):
        need = pod.quota_mem if limit.resource == names.resources.gpu_mem else pod.quota_core
        if limit.mechanism != ELASTIC_QUOTA_TREE or need <= limit.left:
            continue
        unit = f" {names.memory_unit}" if limit.resource == names.resources.gpu_mem else " %"
        held.append(f"{limit.label} has {limit.key} {limit.hard}{unit}, {limit.used} used, {limit.left} left; "
                    f"the pod needs {need}{unit}: it waits until the quota node's usage falls below its max")
    return held


def pending(pod: PodInfo) -> bool:
    """A GPU pod the scheduler has not bound yet."""
    return not pod.node_name and not pod.terminated and (bool(pod.gpus) or pod.topology_gpus > 0)


def pod_request_of(pod: PodInfo) -> PodRequest:
    demand = PodDemand(pod.key, pod.gpus, pod.exclusive_gpus, pod.topology_gpus)
    return PodRequest(demand, pod.selector or NodeSelector())


def _closeness(score: NodeScore, demand: PodDemand) -> tuple[int, int, int, str]:
    """Smaller is closer: curable first, then fewer problems, then the smallest memory shortfall."""
    shortfall = 0
    profile = score.profile
    if profile is not None and demand.gpus and profile.cards.cards:
        best = max(c.free_mem for c in profile.cards.cards)
        shortfall = max(0, max(g.mem_per_card for g in demand.gpus) - best)
    return (int(score.unresolvable), len(score.problems), shortfall, score.node)


def _changes(score: NodeScore, demand: PodDemand, names: Names) -> list[str]:
    """What would have to change on (or in the pod, for) the closest node."""
    out: list[str] = []
    profile = score.profile
    node = score.node
    for rule, message in score.problems:
        if rule == "NodeAffinity":
            out.append(f"the pod's node selector or required node affinity would have to admit node {node} "
                       f"({message.split(': ', 1)[-1]})")
        elif rule == "GB002":
            wanted = "core_mem" if demand.is_core_mem else ("topology" if demand.topology_gpus else
                                                            "cgpu, core_mem, share or mps")
            out.append(f"node {node} would need {names.labels.schedule}={wanted} (a node's mode changes only "
                       f"while it runs no GPU pods)")
        elif rule == "GB005":
            out.append(f"node {node} would need the CPU manager policy none")
        elif rule == "GB001":
            others = profile.mem_only if (profile and demand.is_core_mem) else (profile.core_mem if profile else ())
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            out.append(f"the {'mem-only' if demand.is_core_mem else 'core+mem'} pods on node {node} ({shown}) "
                       f"would have to finish or move")
        elif rule == "GB004" and demand.gpus and profile is not None and profile.cards.cards:
            unit, cards = profile.cards.unit, profile.cards.cards
            for gpu in demand.gpus:
                card = max(cards, key=lambda c: (c.free_mem, -c.index))
                mem, core = gpu.mem_per_card, gpu.core_per_card
                each = " a card" if gpu.cards > 1 else ""
                if gpu.cards > len(cards):
                    out.append(f'container "{gpu.container}" spreads over {gpu.cards} cards; node {node} has '
                               f"{len(cards)}: its {names.labels.pod_gpu_count} label would have to be at most "
                               f"{len(cards)}")
                elif mem > card.total_mem:
                    out.append(f'container "{gpu.container}" asks for {mem} {unit}{each}, more than a whole card '
                               f"of node {node} ({card.total_mem} {unit}): ask for at most {card.total_mem}{each}")
                elif mem > card.free_mem:
                    holders = ", ".join(card.pods[:3]) + (f" and {len(card.pods) - 3} more"
                                                          if len(card.pods) > 3 else "")
                    out.append(f"{mem - card.free_mem} {unit} more would have to be free on node {node} "
                               f"GPU{card.index} ({card.free_mem}/{card.total_mem} {unit} free; held by {holders}), "
                               f'or container "{gpu.container}" ask for at most {card.free_mem} {unit}{each}')
                elif core and CORE_PER_CARD - card.used_core < core:
                    out.append(f"{core - (CORE_PER_CARD - card.used_core)}% more compute would have to be "
                               f"free on node {node} GPU{card.index}")
        elif rule == "GB004" and demand.topology_gpus:
            out.append(f"more whole GPUs would have to be free on node {node}: {message}")
        elif rule == "GB003":
            out.append(f"a card of node {node} would need fewer pods (the cGPU limit of pods per card)")
        else:
            out.append(f"{rule}: {message}")
    return out


def explain_pod(pod: PodInfo, state: ClusterState, scorer: Scorer) -> Explanation:
    """The explanation for one pod of ``state`` (a bound pod gets a one-line summary)."""
    if pod.node_name:
        return Explanation(pod.key, pod.node_name, pod.phase or "Unknown",
                           f"Pod {pod.key} is bound to node {pod.node_name} (phase {pod.phase or 'Unknown'}); "
                           f"it is not waiting for a node")
    if not pending(pod):
        return Explanation(pod.key, "", pod.phase or "Unknown",
                           f"Pod {pod.key} asks for no shared or topology GPU; kube-scheduler's own events "
                           f"explain it")
    request = pod_request_of(pod)
    demand = request.demand
    ranking = scorer.rank(request, state)
    entries = [ranking_entry(score, demand) for score in ranking]
    fitting = [s.node for s in ranking if s.fits]
    explanation = Explanation(pod.key, "", pod.phase or "Pending", "", entries, fitting,
                              quota=quota_holds(pod, state, scorer.names))
    unit = scorer.names.memory_unit
    asked = ", ".join(f'"{g.container}" {g.mem} {unit}' + (f" {g.core}% compute" if g.core else "")
                      + (f" over {g.cards} cards" if g.cards > 1 else "") for g in demand.gpus) \
        or f"{demand.topology_gpus} whole GPUs"
    if explanation.quota:
        explanation.summary = (f"Pod {pod.key} ({asked}) waits on its quota: " + "; ".join(explanation.quota)
                               + (f"; {len(fitting)} node(s) could take it now" if fitting else ""))
        return explanation
    if fitting:
        explanation.summary = (f"Pod {pod.key} ({asked}) fits {len(fitting)} node(s) now, best {fitting[0]}; "
                               f"it is waiting for its scheduler, not for room")
        return explanation
    if not ranking:
        explanation.summary = f"Pod {pod.key} ({asked}) is Pending: the cluster state holds no node"
        return explanation
    closest = min(ranking, key=lambda s: _closeness(s, demand))
    explanation.closest = closest.node
    explanation.changes = _changes(closest, demand, scorer.names)
    explanation.summary = (f"Pod {pod.key} ({asked}) fits none of {len(ranking)} node(s); closest is "
                           f"{closest.node}: " + "; ".join(closest.reasons))
    return explanation
