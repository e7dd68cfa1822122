"""The catalog: the shipped ACK facts (checked against the pages' own tables) and the operator's overrides."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from policies.model.catalog import CatalogError, build_catalog, default_catalog
from policies.model.settings import CatalogSettings
from tests.support.helpers import SEEDS

REGION_ID = re.compile(r"\b(?:cn|ap|us|eu|me|na|sa)-[a-z0-9]+(?:-[a-z0-9]+)*\s*$")


def page(number: str) -> str:
    return next(SEEDS.glob(f"{number}_*.txt")).read_text(encoding="utf-8")


def region_ids(text: str, after: str, before: str) -> set[str]:
    """The Region ID column of a page's table: the lines between two sentences that end in an id."""
    table = text[text.index(after):text.index(before)]
    return {found.group().strip() for line in table.splitlines() if (found := REGION_ID.search(line))}


def test_the_shipped_regions_are_the_tables_of_the_ack_pages():
    catalog = default_catalog()
    # "Manage the shared GPU scheduling component": the GPU memory isolation feature (cGPU; mps runs on cGPU)
    isolation = region_ids(page("002"), "available only in the following regions", "Version compatibility")
    assert len(isolation) == 15 and "cn-wulanchabu" in isolation and "eu-central-1" in isolation
    assert catalog.regions_for("cgpu") == isolation
    assert catalog.regions_for("mps") == isolation
    # "Allocate computing power by scheduling shared GPU": computing power allocation (core_mem)
    compute = region_ids(page("000"), "Computing power allocation is available", "Clusters created before")
    assert len(compute) == 15 and {"ap-southeast-7", "cn-shanghai-finance-1"} <= compute
    assert catalog.regions_for("core_mem") == compute
    # "you can install the shared GPU component in any region": share isolates nothing
    assert "install the shared GPU component in any region" in page("002")
    assert catalog.regions_for("share") is None
    assert catalog.regions_for("topology") is None  # a mode the catalog says nothing about works anywhere


def test_the_shipped_version_matrix_is_the_pages():
    versions = default_catalog().versions
    matrix = page("002")
    assert "Docker: 19.03.5 or later" in matrix and "containerd: 1.4.3 or later" in matrix
    assert versions.container_runtime == {"docker": "19.03.5", "containerd": "1.4.3"}
    assert "418.87.01 or later" in matrix and versions.driver == "418.87.01"
    assert "P-series, T-series, V-series, A-series, H-series" in matrix
    assert versions.gpu_series is not None and versions.gpu_series.supported == ("P", "T", "V", "A", "H")
    # the matrix leaves its Kubernetes row empty; computing power allocation needs 1.20 or later
    assert "running Kubernetes 1.20 or later" in page("000")
    assert versions.kubelet == {"cgpu": None, "mps": None, "core_mem": "1.20"}
    assert set(versions.modes) == {"cgpu", "core_mem", "mps"}
    assert {f.family: f.supported for f in versions.os_images} == {
        "Alibaba Cloud Linux": ("3", "2"), "CentOS": ("7.6", "7.7", "7.9"), "Ubuntu": ("22.04",)}
    # "Shared GPU scheduling in registered clusters" supports other releases: warned about, never denied
    assert {f.page for f in versions.os_images_elsewhere} == {"Shared GPU scheduling in registered clusters"}


def test_the_shipped_catalog_is_read_once():
    assert default_catalog() is default_catalog()
    assert build_catalog(None) == default_catalog()
    assert build_catalog(CatalogSettings()) == default_catalog()  # no override: the shipped facts


def test_the_catalog_every_review_shares_cannot_be_changed():
    """One catalog serves every request of every thread: no rule can edit the facts for the next one."""
    catalog = default_catalog()
    with pytest.raises(ValidationError, match="frozen"):
        catalog.versions.driver = "1.0"
    with pytest.raises(ValidationError, match="frozen"):
        catalog.regions = {}
    assert catalog.versions.driver == "418.87.01"


def test_a_file_overrides_whole_keys_and_inline_settings_win(tmp_path):
    override = tmp_path / "catalog.yaml"
    override.write_text("regions:\n  cgpu: [cn-beijing]\n  core_mem: [cn-beijing]\n"
                        "versions:\n  driver: '470.82.01'\n  container_runtime: {containerd: '1.6.0'}\n")
    catalog = build_catalog(CatalogSettings(file=override, regions={"core_mem": ("eu-central-1",)},
                                            versions={"driver": "535.104.05"}))
    assert catalog.regions_for("cgpu") == {"cn-beijing"}
    assert catalog.regions_for("core_mem") == {"eu-central-1"}  # inline wins over the file
    assert catalog.regions_for("mps") == default_catalog().regions_for("mps")  # not overridden: shipped
    assert catalog.versions.driver == "535.104.05"
    assert catalog.versions.container_runtime == {"containerd": "1.6.0"}  # a key is replaced whole
    assert catalog.versions.kubelet == default_catalog().versions.kubelet


def test_a_file_may_override_only_the_versions(tmp_path):
    override = tmp_path / "catalog.yaml"
    override.write_text("regions:\nversions:\n  driver: '550.54.15'\n")
    catalog = build_catalog(CatalogSettings(file=override))
    assert catalog.versions.driver == "550.54.15"
    assert catalog.regions == default_catalog().regions
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing overridden yet\n")
    assert build_catalog(CatalogSettings(file=empty)) == default_catalog()


def test_a_region_list_can_be_lifted_inline():
    catalog = build_catalog(CatalogSettings(regions={"cgpu": None}))
    assert catalog.regions_for("cgpu") is None
    assert catalog.regions_for("core_mem") == default_catalog().regions_for("core_mem")


@pytest.mark.parametrize(("content", "message"), [
    (b"regions: [cn-beijing\n", "invalid YAML"),
    (b"- regions\n", "must be a mapping, got list"),
    (b"region:\n  cgpu: [cn-beijing]\n", "unknown keys ['region']; use regions and versions"),
    (b"versions: [driver, '470.82.01']\n", "versions must be a mapping, got list"),
    (b"regions: cn-beijing\n", "regions must be a mapping, got str"),
    (b"regions:\n  cgpu: [cn-hangzhou\xff]\n", "cannot read catalog"),
])
def test_a_broken_file_is_refused_with_its_name_and_why(tmp_path, content, message):
    override = tmp_path / "catalog.yaml"
    override.write_bytes(content)
    with pytest.raises(CatalogError) as caught:
        build_catalog(CatalogSettings(file=override))
    assert str(caught.value).startswith(f"{override}: ") and message in str(caught.value)


@pytest.mark.parametrize(("content", "message"), [
    (b"regions:\n  cgpu: 42\n", "catalog: invalid data: 1 validation error for Catalog\nregions.cgpu"),
    (b"versions:\n  drivers: '470.82.01'\n", "catalog: invalid data: 1 validation error for VersionMatrix\ndrivers"),
    (b"versions:\n  1: '470.82.01'\n", "catalog: invalid data: keywords must be strings"),
    (b"versions:\n  os_images:\n  - {family: X, match: '(unclosed', supported: ['1']}\n",
     "os_images.0.match\n  Value error, not a regular expression: missing ), unterminated subpattern"),
    (b"versions:\n  os_notes:\n  - {match: '[z-a]', message: m}\n",
     "os_notes.0.match\n  Value error, not a regular expression: bad character range z-a"),
    (b"versions:\n  gpu_series: {supported: [T], match: '*T'}\n",
     "gpu_series.match\n  Value error, not a regular expression: nothing to repeat"),
])
def test_invalid_data_is_refused_by_what_is_wrong(tmp_path, content, message):
    """Found when the merged data (shipped, file, inline) is validated: named by its place in the catalog."""
    override = tmp_path / "catalog.yaml"
    override.write_bytes(content)
    with pytest.raises(CatalogError) as caught:
        build_catalog(CatalogSettings(file=override))
    assert message in str(caught.value)


def test_a_missing_file_is_refused(tmp_path):
    missing = tmp_path / "nowhere.yaml"
    with pytest.raises(CatalogError, match=r"nowhere\.yaml: cannot read catalog: .*No such file"):
        build_catalog(CatalogSettings(file=missing))
    with pytest.raises(CatalogError, match="cannot read catalog"):
        build_catalog(CatalogSettings(file=tmp_path))  # a directory


def test_a_broken_inline_override_is_refused():
    with pytest.raises(CatalogError, match="not a regular expression"):
        build_catalog(CatalogSettings(versions={"os_images": [{"family": "X", "match": "(unclosed",
                                                               "supported": ["1"]}]}))
    with pytest.raises(CatalogError, match="catalog: invalid data"):
        build_catalog(CatalogSettings(versions={"kubelet": ["1.20"]}))
