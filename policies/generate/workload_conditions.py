"""The custom workloads' webhook condition: CEL that sends a PyTorchJob, a RayCluster or a Workflow
only when some container of some replica shows what a rule declares relevant.

One webhook is registered for every kind of the workload table, so the condition dispatches on
``request.kind`` and gathers, per kind, the containers of each pod location. CEL has no flatten, so
the containers are gathered as nested lists, one level per map or list of replicas on the way
(``spec.pytorchReplicaSpecs.*``: a list of container lists), and the container test is written once
per nesting depth, not once per kind. The paths go through maps and lists by index (``o['spec']``)
with a type test at every level: some of these CRDs are installed with schemas that preserve any
field (Argo's and KServe's "minimal" ones), and an error in a condition under ``failurePolicy:
Fail`` would refuse the object, so no shape the API server admits may make the CEL fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from policies.model.field_paths import EVERY_ITEM, EVERY_VALUE, Pattern, wildcards
from policies.model.workloads import Holder, WorkloadKind
from policies.rules.cel import quote, string_list

Leaf = Callable[[str], str]  # CEL over a node -> a list of what is tested there
Item = tuple[Pattern, Leaf]


def collect(node: str, items: list[Item], level: int = 0) -> str:
    """CEL: what each item's leaf gives at every value its pattern reaches from ``node``, nested one
    list deeper per map or list on the way ([] wherever a field is missing or has another type). The
    items share their common prefixes, and each value reached is bound to a short name (``[x].map(v,
    ...)[0]``), so the text grows with the number of fields, not with the paths' lengths; every item
    must go through as many maps and lists as the others (their results are concatenated)."""
    parts = [leaf(node) for pattern, leaf in items if not pattern]
    branches: dict[str, list[Item]] = {}
    for pattern, leaf in items:
        if pattern:
            branches.setdefault(pattern[0], []).append((pattern[1:], leaf))
    for part, rest in branches.items():
        var = f"v{level}"
        if part == EVERY_ITEM:
            parts.append(f"(type({node}) == list ? {node}.map({var}, {collect(var, rest, level + 1)}) : [])")
        elif part == EVERY_VALUE:
            key = f"k{level}"
            parts.append(f"(type({node}) == map ? {node}.map({key}, [{node}[{key}]].map({var}, "
                         f"{collect(var, rest, level + 1)})[0]) : [])")
        else:
            parts.append(f"(type({node}) == map && {quote(part)} in {node} ? [{node}[{quote(part)}]].map({var}, "
                         f"{collect(var, rest, level + 1)})[0] : [])")
    return parts[0] if len(parts) == 1 else f"({' + '.join(parts)})"


def _containers(holder: Holder) -> Leaf:
    if holder.resources:
        return lambda node: f"(type({node}) == map ? [{{'resources': {node}}}] : [])"
    if holder.resources_field:  # a container-like object (a TrainJob's trainer): its env, its resources' field
        field = quote(holder.resources_field)
        return lambda node: (f"(type({node}) == map ? [{{'resources': {field} in {node} ? {node}[{field}] : {{}}, "
                             f"'env': 'env' in {node} ? {node}['env'] : []}}] : [])")
    if holder.many:
        return lambda node: f"(type({node}) == list ? {node} : [])"
    return lambda node: f"(type({node}) == map ? [{node}] : [])"


def container_items(kind: WorkloadKind) -> list[Item]:
    """Every holder of every location of ``kind``, as (path from the object, the containers there)."""
    return [((*location.pattern, *holder.field), _containers(holder)) for location in kind.locations
            for holder in location.shape.holders]


def _names_key(test: str) -> str:
    """CEL over a container ``c`` of any shape: a key of its limits or requests passes ``test``."""
    r = "c['resources']"
    return (f"('resources' in c && type({r}) == map ? ['limits', 'requests'].exists(s, s in {r} && "
            f"(type({r}[s]) == map ? {r}[s].exists(k, {test}) : false)) : false)")


def container_test(keys: frozenset[str], requested: frozenset[str], env: frozenset[str], key_test: str,
                   env_from: frozenset[str] = frozenset()) -> str:
    """CEL over a container ``c`` of any shape: a key of its limits or requests passes ``key_test`` (one
    of ``keys``, or a near miss; written once for both), a key of its requests is one of ``requested``,
    it sets an env variable of ``env``, or it takes envFrom beside a key of ``env_from``. A macro is
    only ever called on a value its type test chose (``x ? ... : false``): ``&&`` would evaluate it
    on a null too."""
    terms = []
    tests = [key_test] if key_test != "false" else []
    if requested:
        tests.append(f"(s == 'requests' && k in {string_list(requested)})")
    if tests:
        terms.append(_names_key(" || ".join(tests)))
    if env:
        terms.append(f"('env' in c && type(c['env']) == list ? c['env'].exists(e, type(e) == map && 'name' in e "
                     f"&& e['name'] in {string_list(env)}) : false)")
    if env_from:
        terms.append(f"('envFrom' in c && type(c['envFrom']) == list ? size(c['envFrom']) > 0 && "
                     f"{_names_key(f'k in {string_list(env_from)}')} : false)")
    return f"(type(c) == map ? {' || '.join(terms)} : false)" if terms else "false"


def _nested_exists(lists: str, depth: int, test: str, item: str) -> str:
    """CEL: some item at ``depth`` lists below ``lists`` passes ``test`` over ``item``."""
    inner = f"{item}, {test}"
    for level in range(depth, 0, -1):
        inner = f"l{level}, l{level}.exists({inner})"
    return f"{lists}.exists({inner})"


def _is_one_of(kinds: list[WorkloadKind]) -> str:
    by_group: dict[str, list[str]] = {}
    for kind in kinds:
        by_group.setdefault(kind.group, []).append(kind.kind)
    terms = [f"request.kind.group == {quote(group)} && "
             + (f"request.kind.kind == {quote(names[0])}" if len(names) == 1
                else f"request.kind.kind in {string_list(names)}") for group, names in by_group.items()]
    return terms[0] if len(terms) == 1 else " || ".join(f"({t})" for t in terms)


def gathered(kinds: Iterable[WorkloadKind], items: Callable[[WorkloadKind], list[Item]], test: str,
             item: str) -> str:
    """CEL: some item gathered over every kind passes ``test``. Kinds that keep their pods at the same
    places share one branch; what lies fewer maps and lists deep is wrapped in lists up to the
    deepest, so that ``test`` is written once."""
    alike: dict[tuple[tuple[Pattern, str], ...], list[WorkloadKind]] = {}
    for kind in kinds:
        placed = items(kind)
        if placed:
            alike.setdefault(tuple((pattern, leaf("x")) for pattern, leaf in placed), []).append(kind)
    by_depth: dict[int, list[str]] = {}
    for same_places in alike.values():
        parts: dict[int, list[Item]] = {}
        for one in items(same_places[0]):
            parts.setdefault(wildcards(one[0]), []).append(one)
        for depth, same in sorted(parts.items()):
            by_depth.setdefault(depth, []).append(f"({_is_one_of(same_places)} ? {collect('object', same)} : [])")
    if not by_depth:
        return ""
    deepest = max(by_depth)
    lists = [("[" * (deepest - depth)) + f"({' + '.join(terms)})" + ("]" * (deepest - depth))
             for depth, terms in sorted(by_depth.items())]
    return _nested_exists(f"({' + '.join(lists)})", deepest, test, item)


def workload_terms(kinds: list[WorkloadKind], container: str, patch_names: frozenset[str]) -> list[str]:
    """The condition's alternatives: a container passes ``container``; a pod spec patch string mentions
    one of ``patch_names``."""
    terms = []
    if container != "false":
        terms.append(gathered(kinds, container_items, container, "c"))
    if patch_names:
        mention = " || ".join(f"p.contains({quote(name)})" for name in sorted(patch_names))

        def strings(node: str) -> str:
            return f"(type({node}) == string ? [{node}] : [])"

        terms.append(gathered(kinds, lambda k: [(pattern, strings) for pattern in k.patches], mention, "p"))
    return [t for t in terms if t]
