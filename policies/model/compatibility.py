"""A node's components against the version matrix (rule GN007).

Each component ends as one of three answers: fits, known incompatible (the node shows a
value the matrix refuses), or unknown (the node does not show it, or the matrix does not
know the value). The rule denies the second and warns about the third.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from policies.model.catalog import OsElsewhere, VersionMatrix
from policies.model.cluster import NodeInfo
from policies.model.settings import Names

Status = Literal["incompatible", "unknown"]
_NUMBERS = re.compile(r"(\d+(?:\.\d+)*)")


@dataclass(frozen=True, slots=True)
class Mismatch:
    component: str
    status: Status
    message: str


def version_tuple(text: str) -> tuple[int, ...] | None:
    """The first dotted number in ``text``: "v1.28.3-aliyun.1" -> (1, 28, 3); "19.03.5" -> (19, 3, 5)."""
    found = _NUMBERS.search(text)
    return tuple(int(p) for p in found.group(1).split(".")) if found else None


def _at_least(component: str, shown: str, minimum: str) -> Mismatch | None:
    have, need = version_tuple(shown), version_tuple(minimum)
    if have is None or need is None:
        return Mismatch(component, "unknown", f"{component} {shown!r} has no version number the matrix can "
                                              f"compare (needs {minimum} or later)")
    if have < need:
        return Mismatch(component, "incompatible", f"{component} {shown} is older than {minimum}; "
                                                   f"upgrade to {minimum} or later")
    return None


def _kubelet(node: NodeInfo, mode: str, matrix: VersionMatrix) -> Mismatch | None:
    minimum = matrix.kubelet.get(mode)
    if minimum is None:
        return None
    if not node.kubelet_version:
        return Mismatch("kubelet", "unknown", f"kubelet version not reported (needs {minimum} or later)")
    return _at_least("kubelet", node.kubelet_version, minimum)


def _runtime(node: NodeInfo, matrix: VersionMatrix) -> Mismatch | None:
    if not matrix.container_runtime:
        return None
    wanted = ", ".join(f"{name} >= {version}" for name, version in matrix.container_runtime.items())
    shown = node.container_runtime
    if not shown:
        return Mismatch("container runtime", "unknown", f"container runtime not reported (supported: {wanted})")
    runtime, _, version = shown.partition("://")
    minimum = matrix.container_runtime.get(runtime)
    if minimum is None or not version:
        return Mismatch("container runtime", "unknown", f"container runtime {shown} is not in the matrix "
                                                        f"(supported: {wanted})")
    return _at_least(runtime, version, minimum)


def _driver(node: NodeInfo, matrix: VersionMatrix, driver_labels: tuple[str, ...]) -> Mismatch | None:
    if matrix.driver is None:
        return None
    shown = next((node.labels[k] for k in driver_labels if node.labels.get(k)), "")
    if not shown:
        return Mismatch("NVIDIA driver", "unknown", f"NVIDIA driver version not shown (no label "
                                                    f"{' or '.join(driver_labels)}; needs {matrix.driver} or later)")
    return _at_least("NVIDIA driver", shown, matrix.driver)


def _supported_elsewhere(shown: str, matrix: VersionMatrix) -> OsElsewhere | None:
    """The entry of another ACK page that supports this OS release, if one does."""
    for family in matrix.os_images_elsewhere:
        found = re.search(family.match, shown)
        have = version_tuple(found.groupdict().get("version") or "") if found is not None else None
        if have and any(have[:len(v)] == v for v in (version_tuple(s) or () for s in family.supported)):
            return family
    return None


def _os_image(node: NodeInfo, matrix: VersionMatrix) -> list[Mismatch]:
    if not matrix.os_images:
        return []
    wanted = "; ".join(f"{f.family} {', '.join(f.supported)}" for f in matrix.os_images)
    shown = node.os_image
    if not shown:
        return [Mismatch("OS image", "unknown", f"OS image not reported (supported: {wanted})")]
    for family in matrix.os_images:
        found = re.search(family.match, shown)
        if found is None:
            continue
        have = version_tuple(found.groupdict().get("version") or "") or ()
        accepted = [version_tuple(v) or () for v in family.supported]
        if any(have[:len(v)] == v for v in accepted):
            return [Mismatch("OS image", "unknown", f"OS image {shown!r}: {note.message}")
                    for note in matrix.os_notes if re.search(note.match, shown)]
        supported = ", ".join(family.supported)
        if any(v[:len(have)] == have for v in accepted):
            return [Mismatch("OS image", "unknown", f"OS image {shown!r} does not show which {family.family} "
                                                    f"release it is (supported: {supported})")]
        elsewhere = _supported_elsewhere(shown, matrix)
        if elsewhere is not None:
            return [Mismatch("OS image", "unknown", f"OS image {shown!r} is not in the cGPU version matrix of "
                                                    f'"Manage the shared GPU scheduling component" ({supported}), '
                                                    f'but "{elsewhere.page}" supports {elsewhere.family} '
                                                    f"{', '.join(elsewhere.supported)} for its nodes")]
        return [Mismatch("OS image", "incompatible", f"OS image {shown!r} is not a supported {family.family} "
                                                     f"release (supported: {supported})")]
    return [Mismatch("OS image", "unknown", f"OS image {shown!r} is not in the matrix (supported: {wanted})")]


def _gpu_series(node: NodeInfo, matrix: VersionMatrix, names: Names) -> Mismatch | None:
    series = matrix.gpu_series
    if series is None:
        return None
    supported = ", ".join(f"{s}-series" for s in series.supported)
    card = node.labels.get(names.labels.card_name, "")
    if not card:
        return Mismatch("GPU", "unknown", f"GPU model not shown (no label {names.labels.card_name}; "
                                          f"supported: {supported})")
    found = re.search(series.match, card)
    if found is None:
        return Mismatch("GPU", "unknown", f"GPU {card} has no series the matrix knows (supported: {supported})")
    if found.group("series") not in series.supported:
        return Mismatch("GPU", "incompatible", f"GPU {card} is {found.group('series')}-series, not supported "
                                               f"(supported: {supported})")
    return None


def node_mismatches(node: NodeInfo, mode: str, matrix: VersionMatrix, names: Names,
                    driver_labels: tuple[str, ...]) -> list[Mismatch]:
    """Every component of the node that the matrix refuses or cannot confirm for ``mode``."""
    if mode not in matrix.modes:
        return []
    found = [_kubelet(node, mode, matrix), _runtime(node, matrix), _driver(node, matrix, driver_labels),
             _gpu_series(node, matrix, names)]
    return [m for m in found if m is not None] + _os_image(node, matrix)
