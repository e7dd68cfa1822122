"""``workloads.kinds``: custom resources whose pod templates the rules judge, beside the built-in
table (policies/model/workloads.py; docs/workloads.md)."""

# Annotations stay objects (no ``from __future__ import annotations``), as in policies/model/settings.py.
from typing import Any, Literal, Self

from pydantic import Field, field_validator, model_validator

from policies.model.field_paths import parse_pattern
from policies.model.settings_section import _Section

WorkloadHolds = Literal["template", "podSpec", "container", "containers", "resources"]
# Kinds the rules judge as Kubernetes defines them; a workloads.kinds entry cannot redefine them.
KUBERNETES_GROUPS = frozenset({"", "apps", "batch", "extensions"})


class WorkloadPath(_Section):
    """A place in a custom resource that holds pods' definitions: a path pattern (policies/model/field_paths.py)
    and what is found there."""

    path: str
    holds: WorkloadHolds = "template"

    @field_validator("path")
    @classmethod
    def _readable(cls, value: str) -> str:
        parse_pattern(value)  # PatternError (a ValueError) names what is wrong
        return value


class WorkloadKindSettings(_Section):
    """A custom resource kind whose pod templates the rules judge (docs/workloads.md). A plain string in
    ``paths`` is a pod template (metadata and spec)."""

    group: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    paths: tuple[WorkloadPath, ...] = Field(min_length=1)
    # For the webhook registration (gpushare policy export --webhooks): the resource name and versions.
    plural: str = ""
    versions: tuple[str, ...] = ("*",)
    namespaced: bool = True

    @field_validator("paths", mode="before")
    @classmethod
    def _strings_are_templates(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [{"path": v} if isinstance(v, str) else v for v in value]
        return value

    @model_validator(mode="after")
    def _not_a_kubernetes_kind(self) -> Self:
        if self.group in KUBERNETES_GROUPS:
            raise ValueError(f"group {self.group!r} holds Kubernetes' own kinds, which the rules judge already; "
                             f"workloads.kinds is for custom resources")
        return self


class WorkloadSettings(_Section):
    """Custom resources holding pod templates, beside the built-in table (policies/model/workloads.py)."""

    kinds: tuple[WorkloadKindSettings, ...] = ()

    @model_validator(mode="after")
    def _each_kind_once(self) -> Self:
        seen = [f"{k.kind}.{k.group}" for k in self.kinds]
        twice = sorted({n for n in seen if seen.count(n) > 1})
        if twice:
            raise ValueError(f"workloads.kinds names {', '.join(twice)} more than once")
        return self
