"""GS010 and GS011 in the backstop's CEL: every ``env`` entry of every container and init container,
judged as policies/model/isolation.py judges it, the first finding word for word as the webhook writes it.

The literal ``env`` is what the API server shows the policy; ``envFrom`` is judged here only when
``isolation.env_from`` is deny (GS010 then refuses it in the webhook too). A value the kubelet may
expand (``$(`` or ``$$`` in it) is left to the webhook; on the ``ephemeralcontainers`` subresource
(kubectl debug) the ephemeral containers it adds are judged, and nothing else. Only standard CEL and
``matches`` (the backstop's common ground with cel-python, docs/operations.md): the exception for
ALIYUN_COM_GPU_MEM_CONTAINER compares the entry's digits times the pod's cards with every canonical
spelling of that number, since CEL here cannot take a quantity's suffix apart.
"""

from __future__ import annotations

from policies.model.isolation import (
    DISABLES,
    ENV_FROM,
    ENV_FROM_KINDS,
    EXPOSES_ASSIGNED,
    EXPOSES_UNASKED,
    HIDING,
    ON_MPS,
    OVERRIDES,
    REMOVE,
    SHOWN_CHARACTERS,
    TRUE_TEXT,
    judged_names,
)
from policies.model.settings import PolicySettings
from policies.rules.cel import WHOLE_SUFFIXES, Res, by_kind, guarded, quote, string_list, template_path

VALUE = "(has(e.value) ? e.value : '')"
READ_LATER = "has(e.valueFrom)"  # set from a ConfigMap, a Secret or a field: known only at run time
# A value the kubelet may expand ("$(" or "$$" in it) is left to the webhook: the expansion reads the
# entries before it in order, which standard CEL (no list index, no substring) cannot follow.
LITERAL = "!(has(e.value) && e.value.matches('[$][($]'))"
# kubectl debug: the ephemeralcontainers subresource, judged on the ephemeral containers it adds.
DEBUG = "variables.debugContainer"
ADDED = "variables.addedEphemeral"
SHOWN = (f"e.name + '=' + ({READ_LATER} ? '<from ' + (size(e.valueFrom) > 0 ? e.valueFrom.filter(k, true)[0] : "
         f"'valueFrom') + '>' : (size({VALUE}) > {SHOWN_CHARACTERS} ? '<' + string(size({VALUE})) + ' characters>' "
         f": {VALUE}))")
EXPOSES = f"({READ_LATER} || !({VALUE} in {string_list(HIDING)}))"
TRUE = f"({READ_LATER} || {VALUE}.matches({quote('^' + TRUE_TEXT + '$')}))"
FORGED, LIFTED = "variables.forgedEnv", "variables.liftedEnv"


def _uses_gpu(s: PolicySettings) -> str:
    """Container ``c`` requests a GPU resource, shared or whole (policies/model/resources.py watched_resources),
    judged by value: a zero is no request (ContainerRequest.has)."""
    return " || ".join(Res(name).asks() for name in s.names.resources.asked())


def cards(s: PolicySettings) -> str:
    """The pod's cards per container, as GM003 divides by them and GS003's ceiling multiplies by them:
    the multi-GPU label when it is a whole number of 1 or more, else 1; 0 for a number of more than
    15 digits (no share of a whole number of GiB a pod may ask is whole over that many)."""
    key = quote(s.names.labels.pod_gpu_count)

    def per_kind(kind: str) -> str:
        labels = f"{template_path(kind)}.metadata.labels"
        text = f"{labels}[{key}]"
        return (f"(({guarded(labels)} && {key} in {labels}) ? ({text}.matches('^0*[1-9][0-9]{{0,14}}$') ? int({text}) "
                f": (({text}.matches('^[0-9]+$') && !{text}.matches('^0+$')) ? 0 : 1)) : 1)")

    return by_kind(per_kind, "1")


def _gm003_value(s: PolicySettings) -> str:
    """Entry ``e`` of app container ``c`` is what GM003 writes: its digits times the pod's cards are the
    container's gpu-mem (policies/model/resources.py memory_share)."""
    mem, most = Res(s.names.resources.gpu_mem), s.names.max_card_memory
    total, shown = "(int(e.value) * variables.cardsPerContainer)", mem.shown("c")
    spellings = [f"{shown} == string({total})"] + [
        f"({total} % {factor} == 0 && {shown} == string({total} / {factor}) + {quote(suffix)})"
        for suffix, factor in WHOLE_SUFFIXES]
    return (f"(!{READ_LATER} && has(e.value) && size(e.value) <= {len(str(most))} && e.value.matches('^[1-9][0-9]*$') "
            f"&& {mem.named()} && variables.cardsPerContainer > 0 && int(e.value) <= {most} && "
            f"({' || '.join(spellings)}))")


def _forged(s: PolicySettings, app: bool) -> str:
    """Entry ``e`` of container ``c`` overrides what the device plugin sets (GS010)."""
    env, mem = s.names.env, Res(s.names.resources.gpu_mem)
    own = f" && !(e.name == {quote(s.names.env_mem_container)} && {_gm003_value(s)})" if app else ""
    return (f"({LITERAL} && ((e.name in {string_list(env.device_plugin)}{own}) || (e.name in {string_list(env.mps)} "
            f"&& {mem.asks()} && variables.mayRunOnMps) || (e.name == {quote(env.visible_devices)} && "
            f"({_uses_gpu(s)}) && {EXPOSES})))")


def _forged_text(s: PolicySettings) -> str:
    env = s.names.env
    return (f"'env ' + {SHOWN} + (e.name in {string_list(env.device_plugin)} ? {quote(f' {OVERRIDES}; {REMOVE}')} : "
            f"(e.name in {string_list(env.mps)} ? {quote(f' {OVERRIDES} {ON_MPS}; {REMOVE}')} : "
            f"({READ_LATER} ? ' may expose ' : ' exposes ') + {quote(EXPOSES_ASSIGNED)}))")


def _env_from(s: PolicySettings) -> str:
    """A one-item list when container ``c`` uses GPUs and takes envFrom that may set a judged name."""
    could = "(!has(f.prefix) || variables.isolationNames.exists(n, n.startsWith(f.prefix)))"
    sources = f"c.envFrom.filter(f, {could})"
    first = f"{sources}[0]"
    shown = "'source \"\"'"
    for kind in reversed(ENV_FROM_KINDS):
        ref = f"{first}.{kind}"
        shown = f"(has({ref}) ? '{kind} \"' + (has({ref}.name) ? {ref}.name : '') + '\"' : {shown})"
    more = f"(size({sources}) > 1 ? ' and ' + string(size({sources}) - 1) + ' more' : '')"
    return (f"((({_uses_gpu(s)}) && has(c.envFrom) && c.envFrom.exists(f, {could})) ? "
            f"['envFrom ' + {shown} + {more} + {quote(' ' + ENV_FROM)}] : [])")


def _containers(bad_init: str, bad_app: str, text: str, extra: str = "") -> str:
    """Per container, init containers first (the engine's order): its label, then each entry ``e`` it
    sets wrong (``bad_init``/``bad_app``), as ``text`` says it, then ``extra``."""
    def listed(noun: str, bad: str) -> str:
        found = f"(has(c.env) ? c.env.filter(e, {bad}).map(e, {text}) : [])"
        return f"[{quote(noun + ' ' + chr(34))} + c.name + '\"'] + {found}{extra}"

    return (f"{DEBUG} ? {ADDED}.map(c, {listed('ephemeral container', bad_init)}) : "
            f"((has(variables.spec.initContainers) ? variables.spec.initContainers.map(c, "
            f"{listed('init container', bad_init)}) : []) + variables.spec.containers.map(c, "
            f"{listed('container', bad_app)}))")


def _first(found: str) -> str:
    return f"{found}.filter(x, size(x) > 1)[0]"


def ephemeral_variables() -> list[dict[str, str]]:
    """debugContainer: the request is an UPDATE of the ephemeralcontainers subresource (kubectl debug);
    addedEphemeral: then the ephemeral containers the old pod does not have (by name: none can be
    changed or removed), else none. Shared by every rule (the others pass a debug request)."""
    new, old = "object.spec.ephemeralContainers", "oldObject.spec.ephemeralContainers"
    return [{"name": "debugContainer", "expression": "has(request.subResource) && request.subResource == "
                                                     "'ephemeralcontainers'"},
            {"name": "addedEphemeral", "expression": f"({DEBUG} && has({new})) ? {new}.filter(c, !(has({old}) && "
                                                     f"{old}.exists(o, o.name == c.name))) : []"}]


def forged_variables(s: PolicySettings) -> list[dict[str, str]]:
    """cardsPerContainer, mayRunOnMps, isolationNames (envFrom judged) and forgedEnv: per container its
    label and what GS010 finds."""
    schedule, selector = quote(s.names.labels.schedule), "variables.spec.nodeSelector"
    variables = [
        {"name": "cardsPerContainer", "expression": cards(s)},
        {"name": "mayRunOnMps", "expression": f"!(has({selector}) && {schedule} in {selector} && "
                                              f"{selector}[{schedule}] != 'mps')"},
    ]
    extra = ""
    if s.isolation.env_from == "deny":
        variables.append({"name": "isolationNames", "expression": string_list(judged_names(s.names.env))})
        extra = f" + {_env_from(s)}"
    found = _containers(_forged(s, app=False), _forged(s, app=True), _forged_text(s), extra)
    return [*variables, {"name": "forgedEnv", "expression": found}]


def forged(s: PolicySettings) -> str:
    return f"{FORGED}.exists(x, size(x) > 1)"


def forged_message(s: PolicySettings) -> str:
    first = _first(FORGED)
    return f"'GS010: ' + variables.subject + ' ' + {first}[0] + ': ' + {first}[1]"


def _lifted(s: PolicySettings) -> str:
    """Entry ``e`` of container ``c`` lifts isolation (GS011)."""
    env, mem = s.names.env, Res(s.names.resources.gpu_mem)
    return (f"({LITERAL} && ((e.name == {quote(env.disable_isolation)} && {mem.asks()} && {TRUE}) || "
            f"(e.name == {quote(env.visible_devices)} && !({_uses_gpu(s)}) && {EXPOSES})))")


def lifted_variables(s: PolicySettings) -> list[dict[str, str]]:
    """liftedEnv: per container its label and what GS011 finds."""
    text = (f"'env ' + {SHOWN} + (e.name == {quote(s.names.env.visible_devices)} ? ({READ_LATER} ? ' may expose ' : "
            f"' exposes ') + {quote(EXPOSES_UNASKED)} : ({READ_LATER} ? ' may turn ' : ' turns ') + {quote(DISABLES)})")
    return [{"name": "liftedEnv", "expression": _containers(_lifted(s), _lifted(s), text)}]


def lifted(s: PolicySettings) -> str:
    return f"{LIFTED}.exists(x, size(x) > 1)"


def lifted_message(s: PolicySettings) -> str:
    first = _first(LIFTED)
    return f"'GS011: ' + variables.subject + ' ' + {first}[0] + ': ' + {first}[1]"
