"""Where each rule comes from, as users read it (`gpushare rules`, SARIF, the rule tables): the ACK pages
by title, never by the short codes the rules declare (policies/model/sources.py)."""

from __future__ import annotations

import pytest

from policies.model.settings import PolicySettings
from policies.model.sources import cite
from policies.rules.rule_index import rule_entries

GRANT_PAGE = 'ACK documentation: "Allocate computing power by scheduling shared GPU"'
REGISTERED = 'ACK documentation: "Shared GPU scheduling in registered clusters"'
COMPONENT = 'ACK documentation: "Manage the shared GPU scheduling component"'
MULTI_GPU = 'ACK documentation: "Use cGPU to achieve GPU sharing based on multiple GPUs"'


@pytest.mark.parametrize(
    ("rule_id", "sources"),
    [
        ("GS003", (GRANT_PAGE,)),
        ("GS009", (MULTI_GPU,)),
        ("GB005", (REGISTERED, COMPONENT)),
        ("GM003", ('ACK documentation: "Configure GPU sharing without GPU memory isolation"',)),
        # A project decision keeps its reason, as written.
        ("GS007", ("project choice: a misspelt resource name leaves the pod Pending forever",)),
        # A page cited by code beside one cited by title.
        ("GW001", (REGISTERED, "Volcano source code (github.com/volcano-sh/volcano): a Job's pods get its "
                               "schedulerName; left empty it is volcano")),
    ],
)
def test_rules_cite_their_sources_by_title(rule_id, sources):
    entry = next(e for e in rule_entries(PolicySettings()) if e.id == rule_id)
    assert entry.sources == sources
    assert entry.as_dict()["sources"] == list(sources)


def test_no_rule_shows_a_bare_page_code():
    for entry in rule_entries(PolicySettings()):
        assert entry.sources, entry.id
        for source in entry.sources:
            assert not source.isdigit(), (entry.id, source)


@pytest.mark.parametrize(
    ("codes", "cited"),
    [
        ("000, 002", (GRANT_PAGE, COMPONENT)),
        ("005,001", (MULTI_GPU, REGISTERED)),
        (" 001 , , 002 ", (REGISTERED, COMPONENT)),  # empty parts are dropped
        ("", ()),
        ("999", ("999",)),  # not a page of the collection: shown as written
    ],
)
def test_cite(codes, cited):
    assert cite(codes) == cited
