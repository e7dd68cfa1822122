"""53 real manifests from public repositories and documentation (tests/data/corpus/, origins in its
MANIFEST.tsv): every one is read without a crash, each gets the verdict ACK's rules give it
(tests/data/corpus/expected/, one file per manifest, with the reason), and the resources of the
other GPU-sharing systems (alibabacloud.com/, nvidia.com/gpumem, volcano.sh/, koordinator.sh/) are
never flagged."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from tests.support.check_helpers import run_gpushare
from tests.support.helpers import DATA

pytestmark = pytest.mark.processes

CORPUS = DATA / "corpus"
MANIFESTS = CORPUS / "manifests"
EXPECTED = CORPUS / "expected"


def _expected() -> dict[str, dict]:
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(EXPECTED.glob("*.yaml"))}


@pytest.fixture(scope="module")
def checked() -> tuple[int, dict, str]:
    done = run_gpushare("check", "--format", "json", MANIFESTS)
    return done.returncode, json.loads(done.stdout), done.stderr


def test_every_manifest_has_an_origin_and_an_expected_verdict():
    with (CORPUS / "MANIFEST.tsv").open() as table:
        origins = {row["file"] for row in csv.DictReader(table, delimiter="\t")}
    files = {path.name for path in MANIFESTS.iterdir()}
    assert files == origins
    assert {Path(name).stem for name in files} == set(_expected())


def test_each_verdict_is_the_one_ack_s_rules_give(checked):
    code, report, _ = checked
    found: dict[str, list[dict]] = {}
    for finding in report["findings"]:
        found.setdefault(Path(finding["file"]).stem, []).append(
            {"rule": finding["rule"], "severity": finding["severity"], "line": finding["line"]})
    errors = {Path(e["file"]).stem: {"line": e["line"], "message": e["message"]} for e in report["errors"]}
    for stem, expected in _expected().items():
        if expected["verdict"] == "unreadable":
            assert errors.get(stem) == expected["error"], stem
            continue
        assert stem not in errors, (stem, errors.get(stem))
        assert sorted(found.get(stem, []), key=lambda f: (f["line"], f["rule"])) == expected["findings"], stem
    assert code == 2  # the unreadable file; every other file was judged


def test_the_unreadable_file_is_one_clean_line(checked):
    _, _, stderr = checked
    problems = [line for line in stderr.splitlines() if line.startswith("gpushare: error:")]
    assert problems == ["gpushare: error: " + str(MANIFESTS / "38-rai-blog-stable-diffusion-placeholder.yaml")
                        + ":26: invalid YAML: did not find expected key (while parsing a block mapping at line 19); "
                        "the file holds {{ ... }} placeholders: it looks like a Helm or Go template, render it "
                        "first (helm template CHART | gpushare check -)"]
    assert "Traceback" not in stderr


def test_other_gpu_sharing_systems_are_never_flagged(checked):
    _, report, _ = checked
    others = {stem for stem, expected in _expected().items() if not expected["system"].startswith("ACK GPU sharing")}
    assert len(others) > 20
    flagged = {Path(f["file"]).stem for f in report["findings"]}
    assert flagged & others == set()


def test_a_cluster_counting_mib_accepts_the_mib_manifests(tmp_path):
    # File 43 runs the device plugin with --memory-unit=MiB, as its blog says; file 04 is the extender's MiB-era sample.
    config = tmp_path / "config.yaml"
    config.write_text("names: {memory_unit: MiB}\n")
    done = run_gpushare("check", "--config", config, MANIFESTS / "43-blog-ko-gpushare-mib-deployment.yaml",
                        MANIFESTS / "04-ext-samples-4.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_elastic_quota_tree_is_judged_not_skipped(tmp_path):
    # Its verdict is "pass" because every GPU limit is 2147483647, not because no rule reads it: the
    # summary counts it as judged, and the same tree with its root's min lowered is warned (GQ004).
    tree = MANIFESTS / "39-doa-default-eq-tree.yaml"
    done = run_gpushare("check", "--format", "json", tree)
    summary = json.loads(done.stdout)["summary"]
    assert (done.returncode, summary["objects"], summary["skipped"], summary["skippedKinds"]) == (0, 1, 0, {})
    changed = yaml.safe_load(tree.read_text())
    changed["spec"]["root"]["min"]["aliyun.com/gpu-mem"] = "100"
    (tmp_path / "tree.yaml").write_text(yaml.safe_dump(changed))
    done = run_gpushare("check", "--format", "json", tmp_path / "tree.yaml")
    assert [f["rule"] for f in json.loads(done.stdout)["findings"]] == ["GQ004"]
