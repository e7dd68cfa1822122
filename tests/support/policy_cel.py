"""The backstop ValidatingAdmissionPolicy evaluated in this process with cel-python, as the API server
evaluates it: variables bound in order (``variables.*``), then the validations. Only what a check needs
is compiled (a validation and the variables it reads, transitively): cel-python's parser costs seconds
over the whole policy, and the in-process tests judge a few objects each."""

from __future__ import annotations

import functools
import re
from typing import Any

import celpy

_ENV = celpy.Environment()
_READS = re.compile(r"\bvariables\.([A-Za-z_][A-Za-z0-9_]*)")


@functools.cache
def program(expression: str) -> Any:
    """An expression compiled once per process."""
    return _ENV.program(_ENV.compile(expression))


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    """``expression`` on plain JSON-like values (a CEL error fails the test: the API server would deny)."""
    value = program(expression).evaluate({k: v if isinstance(v, celpy.celtypes.MapType) else celpy.json_to_cel(v)
                                          for k, v in activation.items()})
    assert not isinstance(value, celpy.CELEvalError), f"CEL evaluation failed: {value!r}\n{expression[:300]}"
    return value


def request(obj: dict[str, Any], namespace: str, *, old: dict[str, Any] | None = None,
            sub_resource: str = "") -> dict[str, Any]:
    """The request attributes the backstop reads: CREATE, or an UPDATE of ``old`` (of a subresource)."""
    found: dict[str, Any] = {"namespace": namespace, "operation": "UPDATE" if old is not None else "CREATE",
                             "kind": {"kind": obj["kind"]}}
    if sub_resource:
        found["subResource"] = sub_resource
    return found


class PolicyCel:
    """One generated policy: ``failures`` gives the messages of the validations an object fails."""

    def __init__(self, policy: dict[str, Any]) -> None:
        self.variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
        self.validations = policy["spec"]["validations"]

    def _activation(self, obj: dict[str, Any], namespace: str, labels: dict[str, str],
                    old: dict[str, Any] | None, sub_resource: str) -> dict[str, Any]:
        return {"object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
                "request": celpy.json_to_cel(request(obj, namespace, old=old, sub_resource=sub_resource)),
                "namespaceObject": celpy.json_to_cel({"metadata": {"name": namespace, "labels": labels}})}

    def _bind(self, expressions: list[str], activation: dict[str, Any]) -> celpy.celtypes.MapType:
        """The variables ``expressions`` read, transitively, bound in the policy's order."""
        wanted: set[str] = set()
        todo = [name for text in expressions for name in _READS.findall(text)]
        while todo:
            name = todo.pop()
            if name not in wanted:
                wanted.add(name)
                todo.extend(_READS.findall(self.variables[name]))
        bound = celpy.celtypes.MapType({})
        for name, expression in self.variables.items():  # in order, as the API server binds them
            if name in wanted:
                value = program(expression).evaluate({**activation, "variables": bound})
                assert not isinstance(value, celpy.CELEvalError), f"variable {name}: {value!r}"
                bound = celpy.celtypes.MapType({**bound, celpy.celtypes.StringType(name): value})
        return bound

    def variable(self, name: str, obj: dict[str, Any], namespace: str = "default",
                 labels: dict[str, str] | None = None, *, old: dict[str, Any] | None = None,
                 sub_resource: str = "") -> Any:
        """One variable's value on ``obj`` (what the validations read)."""
        activation = self._activation(obj, namespace, labels or {}, old, sub_resource)
        return self._bind([f"variables.{name}"], activation)[celpy.celtypes.StringType(name)]

    def failures(self, obj: dict[str, Any], namespace: str = "default", labels: dict[str, str] | None = None, *,
                 old: dict[str, Any] | None = None, sub_resource: str = "", rules: tuple[str, ...] = ()) -> list[str]:
        """The messages of the validations ``obj`` fails (only those of ``rules``' ids when given)."""
        checks = [v for v in self.validations
                  if not rules or any(v["message"].startswith(f"{r}:") for r in rules)]
        activation = self._activation(obj, namespace, labels or {}, old, sub_resource)
        activation["variables"] = self._bind([t for v in checks for t in (v["expression"], v["messageExpression"])],
                                             activation)
        failed = []
        for check in checks:
            ok = program(check["expression"]).evaluate(activation)
            assert isinstance(ok, celpy.celtypes.BoolType), f"CEL evaluation failed: {ok!r}"
            if not ok:
                text = program(check["messageExpression"]).evaluate(activation)
                assert isinstance(text, str), f"messageExpression failed: {text!r}"
                failed.append(str(text))
        return failed
