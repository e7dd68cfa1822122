"""Small pieces of CEL text shared by the generated backstop policy and webhook matchConditions."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from policies.model.resources import POD_SPEC_PATHS


def quote(text: str) -> str:
    """A CEL string literal (single-quoted, backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def string_list(items: Iterable[str]) -> str:
    """A CEL list literal of strings, in sorted order (the generated text is stable)."""
    return "[" + ", ".join(quote(item) for item in sorted(items)) + "]"


def guarded(path: str) -> str:
    """``has()`` for every optional level of a dotted path below its root (``object.spec.template``:
    ``has(object.spec) && has(object.spec.template)``)."""
    parts = path.split(".")
    return " && ".join(f"has({'.'.join(parts[:i])})" for i in range(2, len(parts) + 1))


# The suffixes a canonical quantity carries on a whole number (k8s.io/apimachinery Quantity.String:
# DecimalSI "1k", DecimalExponent "1e3", BinarySI "1Ki"; a BinarySI value under 1024 is printed as
# DecimalSI), with what each multiplies by.
WHOLE_SUFFIXES = (("k", 10**3), ("M", 10**6), ("G", 10**9), ("T", 10**12), ("e3", 10**3), ("e6", 10**6),
                  ("e9", 10**9), ("e12", 10**12), ("Ki", 2**10), ("Mi", 2**20), ("Gi", 2**30), ("Ti", 2**40))


def template_path(kind: str) -> str:
    """The CEL path of the pod template's object (its metadata and spec sit below it)."""
    parts = POD_SPEC_PATHS[kind][:-1]
    return ".".join(("object", *map(str, parts)))


def by_kind(build: Callable[[str], str], default: str) -> str:
    """One expression per kind, chosen by object.kind (Pod first: the common case)."""
    expr = default
    for kind in reversed(list(POD_SPEC_PATHS)):
        expr = f"(object.kind == {quote(kind)} ? {build(kind)} : {expr})"
    return expr


@dataclass(frozen=True)
class Res:
    """CEL snippets about one resource name in a container ``c``."""

    name: str

    def lim(self, c: str = "c") -> str:
        return f"(has({c}.resources) && has({c}.resources.limits) && {quote(self.name)} in {c}.resources.limits)"

    def req(self, c: str = "c") -> str:
        return f"(has({c}.resources) && has({c}.resources.requests) && {quote(self.name)} in {c}.resources.requests)"

    def named(self, c: str = "c") -> str:
        return f"({self.lim(c)} || {self.req(c)})"

    def limit(self, c: str = "c") -> str:
        return f"string({c}.resources.limits[{quote(self.name)}])"

    def request(self, c: str = "c") -> str:
        return f"string({c}.resources.requests[{quote(self.name)}])"

    def asks(self, c: str = "c") -> str:
        """Container ``c`` requests the resource, judged by value as the engine judges it
        (policies/model/resources.py ContainerRequest.has): the judged value (the limit, else the request)
        is not zero, which the API server sends in canonical form as ``0``."""
        return f"({self.lim(c)} ? {self.limit(c)} != '0' : ({self.req(c)} && {self.request(c)} != '0'))"

    def bad_value(self, pattern: str, c: str = "c") -> str:
        """The judged value (the limit, else the request, as the engine's value rules judge it) does
        not match ``pattern``."""
        return (f"({self.lim(c)} ? !{self.limit(c)}.matches({quote(pattern)}) : "
                f"({self.req(c)} && !{self.request(c)}.matches({quote(pattern)})))")

    def shown(self, c: str) -> str:
        """The judged value of container ``c``: the limit, else the request."""
        return f"({self.lim(c)} ? {self.limit(c)} : {self.request(c)})"
