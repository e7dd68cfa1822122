"""The kubelet's ``$(VAR)`` expansion of a container's ``env`` values, as GS010 and GS011 read them.

The kubelet builds a container's environment in ``makeEnvironmentVariables``
(kubernetes/kubernetes ``pkg/kubelet/kubelet_pods.go``): the keys of every ``envFrom`` source first
(each with its ``prefix``), then each ``env`` entry in order, a non-empty ``value`` expanded with
``expansion.Expand`` against what is set so far and then the service-link variables
(``expansion.MappingFuncFor(tmpEnv, serviceEnv)``), a ``valueFrom`` resolved without expansion; each
result is set under its name, so later entries see it. ``Expand`` (``third_party/forked/golang/
expansion/expand.go``): ``$(NAME)`` is replaced by NAME's value, or kept as written when NAME is not
set; ``$$`` is one ``$``; ``$`` before any other character, or last, stays; ``$(`` with no ``)``
after it stays, and reading goes on just after the ``(``.

Admission cannot read a ConfigMap, a Secret, a field or a Service, so a value may be *unknown*: a
reference to a ``valueFrom`` entry, to a name an ``envFrom`` source may set, or to a service-link
variable. What is unknown is judged as the worst it could be, as ``valueFrom`` is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

# The names the kubelet sets for a Service (pkg/kubelet/envvars/envvars.go, FromServices and
# makeLinkVariables): NAME_SERVICE_HOST, NAME_SERVICE_PORT[_PORTNAME], NAME_PORT and
# NAME_PORT_<port>_<PROTOCOL>[_PROTO|_PORT|_ADDR], NAME the Service's name upper-cased with "-" as "_".
SERVICE_LINK = re.compile(r"[A-Z][A-Z0-9_]*_(?:SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?|PORT"
                          r"(?:_[0-9]+_(?:TCP|UDP|SCTP)(?:_(?:PROTO|PORT|ADDR))?)?)")
# The master service ("kubernetes" in the default namespace) is linked whatever enableServiceLinks says
# (getServiceEnvVarMap in kubelet_pods.go).
MASTER_SERVICE = "KUBERNETES_"


@dataclass(frozen=True, slots=True)
class Unknown:
    """A value admission cannot read: ``name`` is the reference that brought it in, ``source`` where
    its value comes from at run time (``configMapKeyRef``, ``envFrom``, ``a service link``...)."""

    name: str
    source: str

    @property
    def shown(self) -> str:
        return f"<{self.name} from {self.source}>" if self.name else f"<{self.source}>"


# What one container's expansion may produce in all, in characters. A value may reference a long one
# many times (700 KB referenced 100,000 times fits in a pod); past this, what is left is unknown
# (judged as the worst) rather than built in memory.
BUDGET = 1 << 22
TOO_LONG = Unknown("", f"more than {BUDGET} characters once expanded")


class Budget:
    """The characters one container's expansion may still produce."""

    __slots__ = ("left",)

    def __init__(self, left: int = BUDGET) -> None:
        self.left = left


Value = str | Unknown


@dataclass(frozen=True, slots=True)
class RawEnv:
    """One ``env`` entry as the expansion reads it: its name, and its ``value`` or (``value`` None) the
    kind of its ``valueFrom``."""

    name: str
    value: str | None
    source: str = ""


def expand(text: str, lookup: Mapping[str, Value] | None, resolve: ResolveMissing,
           budget: Budget | None = None) -> Value:
    """``text`` expanded as the kubelet's ``expansion.Expand`` does; Unknown when a reference is, or when
    the result would pass what ``budget`` has left."""
    if "$" not in text:
        return text
    budget = budget or Budget()
    length = len(text)  # what is copied as written is at most the text itself
    out: list[str] = []
    unknown: Unknown | None = None
    checkpoint, cursor, size = 0, 0, len(text)
    unclosed = False  # no ")" is left: every later "$(" is incomplete (no search again: linear in the text)
    while cursor < size:
        if text[cursor] == "$" and cursor + 1 < size:
            out.append(text[checkpoint:cursor])
            after = text[cursor + 1]
            if after == "$":  # an escaped operator
                out.append("$")
                advance = 1
            elif after == "(":
                closer = -1 if unclosed else text.find(")", cursor + 2)
                if closer < 0:  # an incomplete reference stays, and reading goes on after its "("
                    unclosed = True
                    out.append("$(")
                    advance = 1
                else:
                    name = text[cursor + 2:closer]
                    found = lookup.get(name) if lookup is not None else None
                    if found is None:
                        found = resolve(name)
                    if isinstance(found, Unknown):
                        unknown = unknown or found
                    else:
                        length += len(found)
                        if length > budget.left:
                            return TOO_LONG
                        out.append(found)
                    advance = closer - cursor
            else:  # an operator that starts nothing: it stays with the character after it
                out.append("$" + after)
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    if unknown is not None:
        return unknown
    out.append(text[checkpoint:])
    result = "".join(out)
    budget.left -= len(result)
    return result


class ResolveMissing:
    """What a name that no earlier ``env`` entry set expands to: unknown when an ``envFrom`` source may
    set it (its prefix starts the name) or it is a service-link variable, else ``$(NAME)`` as written."""

    __slots__ = ("prefixes", "service_links")

    def __init__(self, prefixes: Sequence[str], service_links: bool) -> None:
        self.prefixes = tuple(prefixes)
        self.service_links = service_links

    def __call__(self, name: str) -> Value:
        # "$()" names nothing an envFrom source can set: its keys must be C identifiers
        # (kubernetes/kubernetes docs/proposals/envvar-configmap.md), never empty.
        if name and any(name.startswith(prefix) for prefix in self.prefixes):
            return Unknown(name, "envFrom")
        if (self.service_links or name.startswith(MASTER_SERVICE)) and SERVICE_LINK.fullmatch(name):
            return Unknown(name, "a service link")
        return f"$({name})"


def expanded_values(env: Iterable[RawEnv], wanted: Iterable[int], prefixes: Sequence[str],
                    service_links: bool) -> dict[int, Value]:
    """The values the kubelet gives the entries at positions ``wanted`` of ``env`` (a ``valueFrom``
    entry is Unknown under its own name)."""
    wanted = set(wanted)
    last = max(wanted, default=-1)
    resolve = ResolveMissing(prefixes, service_links)
    budget = Budget()
    known: dict[str, Value] = {}
    found: dict[int, Value] = {}
    for position, entry in enumerate(env):
        if position > last:
            break
        if entry.value is None:
            value: Value = Unknown(entry.name, entry.source or "valueFrom")
        else:  # the kubelet expands a non-empty value only; an empty one has no "$" and stays as it is
            value = expand(entry.value, known, resolve, budget)
        known[entry.name] = value
        if position in wanted:
            found[position] = value
    return found
