"""What a user reads cites documents they can find: no internal numbers, issue ids or paths
outside the repository, in the CLI's output or in the docs."""

from __future__ import annotations

import json
import re

import pytest

from policies.model.sources import ACK_PAGES
from tests.support.check_helpers import SEED_33, run_gpushare
from tests.support.hermetic import ROOT

pytestmark = pytest.mark.processes

JARGON = re.compile(r"seeds? 0\d\d|(?<!-)\bseeds?\b|\bissue [0-9]+|branch `?state|DESIGN\.md|\.\./shared|"
                    r"\(0\d\d(, 0\d\d)*\)")
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "policies" / "data").glob("*.yaml")), ROOT / "webhook" / "data" / "demo-snapshot.yaml",
             *sorted((ROOT / "deploy").rglob("*.yaml")), ROOT / "Dockerfile"]


def test_rules_table_json_and_sarif_cite_page_titles(tmp_path):
    table = run_gpushare("rules")
    listing = run_gpushare("rules", "--format", "json")
    job = tmp_path / "job.yaml"  # a file name that is not itself a word under test
    job.write_text(SEED_33.read_text())
    sarif = run_gpushare("check", "--format", "sarif", job)
    for done in (table, listing, sarif):
        assert [m.group(0) for m in JARGON.finditer(done.stdout)] == []
    for title in ACK_PAGES.values():
        assert f'ACK documentation: "{title}"' in table.stdout
    [run] = json.loads(sarif.stdout)["runs"]
    gs001 = next(r for r in run["tool"]["driver"]["rules"] if r["id"] == "GS001")
    assert '(Source: ACK documentation: "Allocate computing power by scheduling shared GPU".)' in gs001["help"]["text"]
    ge001 = next(e for e in json.loads(listing.stdout) if e["id"] == "GE001")
    assert ge001["sources"][0].startswith("project choice: ")


def test_docs_speak_to_users_and_point_nowhere_outside_the_repository():
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}" for path in USER_DOCS
             for n, line in enumerate(path.read_text().splitlines(), 1) if JARGON.search(line)]
    assert found == []
    links = re.compile(r"\]\((?!https?://|#)([^)]+)\)")
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in links.findall(path.read_text()):
            resolved = (path.parent / target.split("#")[0]).resolve()
            assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{path.name} links to {target}"
