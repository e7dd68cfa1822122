"""Facts from the ACK documentation pages as data: regions per mode and the version matrix (policies/data/*.yaml).

The shipped files are the defaults; ``Settings.catalog`` overrides them (a whole file, or
single keys inline). Everything is validated once, when the engine is built, so a broken
override is refused at start and never during an admission request.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from policies.model.settings import CatalogSettings


class CatalogError(ValueError):
    """The catalog data or an override of it is not valid."""


class _Frozen(BaseModel):
    # Validators are built when a catalog is first built, not when a command imports the rules.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    return pattern


class OsFamily(_Frozen):
    family: str
    match: str
    supported: tuple[str, ...]

    _check = field_validator("match")(_compiles)


class OsElsewhere(OsFamily):
    """Releases another ACK page supports for its nodes (``page``: its title)."""

    page: str


class OsNote(_Frozen):
    match: str
    message: str

    _check = field_validator("match")(_compiles)


class GpuSeries(_Frozen):
    supported: tuple[str, ...]
    match: str

    _check = field_validator("match")(_compiles)


class VersionMatrix(_Frozen):
    modes: tuple[str, ...]
    kubelet: dict[str, str | None] = Field(default_factory=dict)
    container_runtime: dict[str, str] = Field(default_factory=dict)
    driver: str | None = None
    os_images: tuple[OsFamily, ...] = ()
    # Releases the matrix refuses but another ACK page supports: warned about, not denied.
    os_images_elsewhere: tuple[OsElsewhere, ...] = ()
    os_notes: tuple[OsNote, ...] = ()
    gpu_series: GpuSeries | None = None


class Catalog(_Frozen):
    """Regions per mode (``None``: any region) and the version matrix."""

    regions: dict[str, tuple[str, ...] | None]
    versions: VersionMatrix

    def regions_for(self, mode: str) -> frozenset[str] | None:
        """The regions a mode works in; None when it works anywhere (or the catalog says nothing)."""
        listed = self.regions.get(mode)
        return None if listed is None else frozenset(listed)


def _read_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise CatalogError(f"{source}: invalid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise CatalogError(f"{source}: must be a mapping, got {type(loaded).__name__}")
    return loaded


def _shipped(name: str) -> dict[str, Any]:
    from importlib import resources  # only here: it loads tempfile, shutil and zipfile

    text = resources.files("policies.data").joinpath(name).read_text(encoding="utf-8")
    return _read_yaml(text, f"policies/data/{name}")


def build_catalog(overrides: CatalogSettings | None = None) -> Catalog:
    """The shipped facts with the operator's overrides on top, validated."""
    regions = _shipped("regions.yaml")
    versions = _shipped("versions.yaml")
    if overrides is not None:
        if overrides.file is not None:
            try:
                text = Path(overrides.file).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise CatalogError(f"{overrides.file}: cannot read catalog: {exc}") from None
            from_file = _read_yaml(text, str(overrides.file))
            unknown = set(from_file) - {"regions", "versions"}
            if unknown:
                raise CatalogError(f"{overrides.file}: unknown keys {sorted(unknown)}; use regions and versions")
            for section, shipped in (("regions", regions), ("versions", versions)):
                given = from_file.get(section)
                if given is None:
                    continue
                # checked here: dict.update would take a list of pairs, or fail with a traceback
                if not isinstance(given, dict):
                    raise CatalogError(f"{overrides.file}: {section} must be a mapping, got {type(given).__name__}")
                shipped.update(given)
        regions.update(overrides.regions)
        versions.update(overrides.versions)
    try:
        return Catalog(regions=regions, versions=VersionMatrix(**versions))
    except (ValidationError, TypeError) as exc:
        raise CatalogError(f"catalog: invalid data: {exc}") from None


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return build_catalog(None)
