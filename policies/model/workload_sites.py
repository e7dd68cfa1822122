"""What a workload object holds, read through its kind's table (policies/model/workloads.py): its pod
templates (or pod specs, or containers) at concrete paths with their containers, the pod spec
patches it carries as strings, the scheduler it gives its pods, its containers' GPU requests, and
a lenient count of pod locations and containers for sizing an object before judging it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from policies.model.field_paths import EVERY_ITEM, EVERY_VALUE, Pattern, render_pattern
from policies.model.resources import ContainerRequest, Path, ShapeError, read_values, render_path, watched_resources
from policies.model.settings import Names
from policies.model.workloads import (
    CONTAINER,
    CONTAINERS,
    TEMPLATE,
    Holder,
    Location,
    WorkloadConfigError,
    WorkloadKind,
)


@dataclass(slots=True)
class ContainerSite:
    """One container of a workload's pod (or the ResourceRequirements standing for one)."""

    group: str  # "containers", "initContainers", or "resources" (a ResourceRequirements)
    index: int
    path: Path
    container: dict[str, Any]
    name: str
    resources_path: Path  # where its resources map is


@dataclass(slots=True)
class PodSite:
    """One pod template (or pod spec, or container set) of a workload, at a concrete path."""

    path: Path
    location: Location
    spec: dict[str, Any] | None
    spec_path: Path
    meta: dict[str, Any] | None
    containers: list[ContainerSite] = field(default_factory=list)


def _type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")


class _Reader:
    """Walks one location of one kind. Strict (the engine): a value of the wrong type is a ShapeError,
    or for a configured kind a WorkloadConfigError. Lenient (what the webhooks' matchConditions see):
    it holds nothing."""

    def __init__(self, kind: WorkloadKind, location: Location, strict: bool = True) -> None:
        self.kind, self.location, self.strict = kind, location, strict

    def fits(self, path: Path, value: Any, wanted: type, what: str) -> bool:
        """Whether ``value`` is a ``wanted``; if not, strict readers raise."""
        if isinstance(value, wanted):
            return True
        if not self.strict:
            return False
        if self.kind.configured:
            raise WorkloadConfigError(self.kind, self.location, path, f"is {_type(value)}, not {what}")
        raise ShapeError(path, f"must be {what}, got {type(value).__name__}")

    def expand(self, node: Any, pattern: Pattern, path: Path) -> Iterator[tuple[Path, Any]]:
        """Every value the pattern reaches in ``node`` (a missing field reaches nothing)."""
        if not pattern:
            yield path, node
            return
        part, rest = pattern[0], pattern[1:]
        if part == EVERY_ITEM:
            if self.fits(path, node, list, "a list"):
                for index, item in enumerate(node):
                    if item is not None:
                        yield from self.expand(item, rest, (*path, index))
        elif not self.fits(path, node, dict, "an object"):
            return
        elif part == EVERY_VALUE:
            for key, value in node.items():
                if value is not None:
                    yield from self.expand(value, rest, (*path, str(key)))
        elif node.get(part) is not None:
            yield from self.expand(node[part], rest, (*path, part))

    def one(self, node: dict[str, Any], rel: Pattern, path: Path) -> tuple[dict[str, Any] | None, Path]:
        for at, value in self.expand(node, rel, path):
            return (value if self.fits(at, value, dict, "an object") else None), at
        return None, (*path, *rel)

    def pod(self, node: Any, path: Path) -> PodSite:
        shape = self.location.shape
        # A containers location is the list itself (as pod_locations counts it); every other shape an object.
        listed = shape is CONTAINERS
        what = ("a pod template (metadata and spec)" if shape is TEMPLATE else
                "a list of containers" if listed else f"a {shape.name}")
        if not self.fits(path, node, list if listed else dict, what):
            return PodSite(path, self.location, None, path, None)
        if self.strict and self.kind.configured and shape.keys is not None and not set(node) <= shape.keys:
            extra = ", ".join(sorted(set(node) - shape.keys)[:3])
            raise WorkloadConfigError(self.kind, self.location, path, f"has {extra}, so it is not {what}")
        spec, spec_path = self.one(node, shape.spec, path) if shape.spec is not None else (None, path)
        meta = self.one(node, shape.meta, path)[0] if shape.meta is not None else None
        site = PodSite(path, self.location, spec, spec_path, meta)
        for holder in shape.holders:
            for at, value in self.expand(node, holder.field, path):
                self._containers(holder, at, value, site.containers)
        return site

    def _containers(self, holder: Holder, at: Path, value: Any, out: list[ContainerSite]) -> None:
        group = "resources" if holder.resources else "initContainers" if holder.init else "containers"
        if holder.many and not self.fits(at, value, list, "a list of containers"):
            return
        for index, container in enumerate(value) if holder.many else ((0, value),):
            where = (*at, index) if holder.many else at
            if not self.fits(where, container, dict, "an object"):
                continue
            if holder.resources:
                out.append(ContainerSite(group, 0, at, {"resources": container}, str(at[-1]), at))
                continue
            if holder.resources_field:  # env and the like as written, resources from their own field
                view = {k: v for k, v in container.items() if k != "resources"}
                if container.get(holder.resources_field) is not None:
                    view["resources"] = container[holder.resources_field]
                out.append(ContainerSite(group, 0, at, view, holder.name, (*at, holder.resources_field)))
                continue
            name = container.get("name")
            label = str(name) if name is not None else holder.name or (
                f"{at[-1]}[{index}]" if holder.many else str(at[-1]))
            out.append(ContainerSite(group, index, where, container, label, (*where, "resources")))


def pod_sites(kind: WorkloadKind, obj: dict[str, Any], strict: bool = True) -> list[PodSite]:
    """Every pod location of ``obj`` with its containers, in table order. Strict: ShapeError for a
    malformed object, WorkloadConfigError where a configured path holds something else; lenient:
    what does not have the expected shape holds nothing."""
    out: list[PodSite] = []
    for location in kind.locations:
        reader = _Reader(kind, location, strict)
        for path, node in reader.expand(obj, location.pattern, ()):
            out.append(reader.pod(node, path))
    return out


def patch_strings(kind: WorkloadKind, obj: dict[str, Any], strict: bool = True) -> list[tuple[Path, str]]:
    """The pod spec patches the object carries as strings, with their paths."""
    found: list[tuple[Path, str]] = []
    for pattern in kind.patches:
        reader = _Reader(kind, Location(pattern, CONTAINER), strict)
        found.extend((p, v) for p, v in reader.expand(obj, pattern, ()) if isinstance(v, str))
    return found


def workload_scheduler(kind: WorkloadKind, obj: dict[str, Any], pod: PodSite) -> tuple[str, str, Path] | None:
    """The scheduler the operator gives this pod from the workload, in words where that comes from (the
    field, or the kind's default), and the field's path; None when the pod's own template names one
    (its own choice) or the kind names none."""
    own = pod.spec.get("schedulerName") if pod.spec is not None else None
    field_ = kind.scheduler
    if field_ is None or (isinstance(own, str) and own):
        return None
    for path, value in _Reader(kind, Location(field_.pattern, CONTAINER)).expand(obj, field_.pattern, ()):
        if isinstance(value, str) and value:
            return value, render_path(path), path
    if field_.default:
        return field_.default, f"the default of {render_pattern(field_.pattern)} in a {kind.name}", pod.spec_path
    return None


def site_requests(sites: list[ContainerSite], names: Names) -> list[ContainerRequest]:
    """The GPU requests of every container of a workload's pod that asks for any GPU resource."""
    watched = watched_resources(names)
    out: list[ContainerRequest] = []
    for site in sites:
        resources = site.container.get("resources")
        if resources is None:
            continue
        if not isinstance(resources, dict):
            raise ShapeError(site.resources_path, f"must be an object, got {type(resources).__name__}")
        limits = read_values(resources, "limits", site.resources_path, watched)
        requests = read_values(resources, "requests", site.resources_path, watched)
        if limits or requests:
            sidecar = site.group == "initContainers" and site.container.get("restartPolicy") == "Always"
            out.append(ContainerRequest(site.name, site.group, site.index, site.path, limits, requests, sidecar))
    return out


def pod_locations(kind: WorkloadKind, obj: dict[str, Any]) -> Iterator[tuple[dict[str, Any] | None, int]]:
    """For each pod location of ``obj`` (leniently: what has another shape holds nothing), its pod
    spec (where nodeSelector and affinity are; None when the location has none) and how many
    containers it holds; for counting an object's size before judging it (policies/admission/budget.py)."""
    for location in kind.locations:
        reader = _Reader(kind, location, strict=False)
        shape = location.shape
        for _, node in reader.expand(obj, location.pattern, ()):
            if not isinstance(node, dict) and not (shape.holders and shape.holders[0].many):
                yield None, 0
                continue
            spec = reader.one(node, shape.spec, ())[0] if shape.spec is not None and isinstance(node, dict) else None
            containers = 0
            for holder in shape.holders:
                for _, value in reader.expand(node, holder.field, ()):
                    containers += (len(value) if isinstance(value, list) else 0) if holder.many else 1
            yield spec, containers
