"""The tables the docs carry, generated in this process (policies/generate/doc_tables.py): docs/workloads.md's
table of kinds and docs/operations.md's "What an outage blocks", from the registrations read from the
deploy files as kustomize merges them (webhooks.yaml, the generated matchConditions merged by webhook
name, each component's patch). tests/deploy/test_outage.py renders them with ``kubectl kustomize``."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.generate.doc_tables import kinds_table, outage_table, registrations
from webhook.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
KUSTOMIZE = ROOT / "deploy" / "kustomize"
COMPONENTS = KUSTOMIZE / "components"
Obj = dict[str, Any]


def _block(doc: str, marker: str) -> str:
    pattern = rf"<!-- generated [^\n]*{re.escape(marker)}[^\n]*-->\n(?P<table>.*?)<!-- end of generated table -->"
    found = re.search(pattern, (ROOT / "docs" / doc).read_text(), re.S)
    assert found, f"docs/{doc} has no generated table {marker!r}"
    return found["table"]


def _merged(objects: list[Obj], patches: list[Obj]) -> list[Obj]:
    """Strategic merge of webhook configurations: webhooks by name, a new one appended."""
    objects = copy.deepcopy(objects)
    for patch in patches:
        target = next(o for o in objects if o["kind"] == patch["kind"] and
                      o["metadata"]["name"] == patch["metadata"]["name"])
        for hook in patch.get("webhooks", []):
            mine = next((h for h in target["webhooks"] if h["name"] == hook["name"]), None)
            if mine is None:
                target["webhooks"].append(copy.deepcopy(hook))
            else:
                mine.update(copy.deepcopy(hook))
    return objects


def _load(path: Path) -> list[Obj]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def installs() -> dict[str, list[tuple[str, Obj]]]:
    base = _merged(_load(KUSTOMIZE / "webhooks.yaml"), _load(KUSTOMIZE / "match-conditions.yaml"))
    backstop_patch = yaml.safe_load(yaml.safe_load((COMPONENTS / "backstop" / "kustomization.yaml").read_text())[
        "patches"][0]["patch"])
    return {"base": registrations(base), "backstop": registrations(_merged(base, [backstop_patch])),
            "custom-workloads": registrations(_merged(base, _load(COMPONENTS / "custom-workloads" / "webhook.yaml")))}


def test_the_outage_table_in_operations_md_is_what_the_registrations_give():
    assert outage_table(installs(), Settings()) == _block("operations.md", "from the rendered webhook registrations")


def test_the_kinds_table_in_workloads_md_is_the_workload_table():
    assert kinds_table() == _block("workloads.md", "from policies/model/workloads.py")


def _hook(name: str, policy: str, rules: list[tuple[list[str], list[str]]], condition: str | None = None) -> Obj:
    hook: Obj = {"name": name, "failurePolicy": policy,
                 "rules": [{"operations": ops, "resources": res} for ops, res in rules]}
    if condition is not None:
        hook["matchConditions"] = [{"name": "c", "expression": condition}]
    return hook


def _config(kind: str, *hooks: Obj) -> Obj:
    return {"kind": kind, "metadata": {"name": "x"}, "webhooks": list(hooks)}


def test_a_webhook_outside_the_generated_scopes_is_described_by_its_registration():
    base = [_config("ValidatingWebhookConfiguration",
                    _hook("extra.example.io", "Fail", [(["CREATE"], ["pods"])], "true"),
                    _hook("plain.example.io", "Ignore", [(["CREATE", "UPDATE"], ["services"]),
                                                         (["DELETE"], ["pods"])])),
            {"kind": "Service", "metadata": {"name": "s"}},
            _config("MutatingWebhookConfiguration", _hook("many.example.io", "Fail", [
                (["CREATE"] if r == "a" else ["UPDATE"], [r]) for r in ("a", "b", "c", "d")]))]
    relaxed = _merged(base, [_config("ValidatingWebhookConfiguration", _hook("extra.example.io", "Ignore", [
        (["CREATE"], ["pods"])]))])
    assert [kind for kind, _ in registrations(base)] == ["validating", "validating", "mutating"]
    # Install names as read at run time (not interned literals); "added" sorts before "base".
    base_name, added = "".join(["ba", "se"]), "".join(["ad", "ded"])
    table = outage_table({base_name: registrations(base), "relax": registrations(relaxed),
                          added: registrations([_config("ValidatingWebhookConfiguration", _hook(
                              "new.example.io", "Ignore", [(["UPDATE"], ["nodes"])]))])}, Settings())
    assert table.splitlines()[2:] == [
        "| `extra.example.io` | CREATE pods: what its matchCondition selects | Fail (Ignore with the relax component) "
        "| refused (admitted unjudged with the component) |",
        "| `plain.example.io` | CREATE, UPDATE services; DELETE pods: every request its rules match "
        "(no matchCondition) | Ignore | admitted unjudged |",
        "| `many.example.io` | CREATE of every kind of the workload table (4 resources): every request its rules "
        "match (no matchCondition) | Fail | refused |",
        "| `new.example.io` (component added) | UPDATE nodes: every request its rules match (no matchCondition) "
        "| Ignore | admitted unjudged |"]


def test_a_fail_open_webhook_a_component_makes_fail_closed_says_so():
    hook = _hook("x.example.io", "Ignore", [(["CREATE"], ["pods"])])
    closed = {**hook, "failurePolicy": "Fail"}
    table = outage_table({"base": [("validating", hook)], "strict": [("validating", closed)]}, Settings())
    assert table.splitlines()[2] == (
        "| `x.example.io` | CREATE pods: every request its rules match (no matchCondition) "
        "| Ignore (Fail with the strict component) | admitted unjudged (refused with it) |")


@pytest.mark.parametrize(("config", "name", "words"), [
    ({}, "nodes.validate.gpushare.io", "GPU nodes (labelled `ack.node.gpu.placement` or `ack.node.gpu.schedule`, "
                                       "now or before); an UPDATE only when it changes a label or annotation"),
    ({}, "pods.validate.gpushare.io", "none a controller made"),
    ({}, "controlled-pods.validate.gpushare.io", "only those a controller made"),
    ({}, "gpushare-daemonsets.mutate.gpushare.io", "only the GPU-sharing DaemonSets and their pods, by name"),
    ({}, "pods.validate.gpushare.io", "created on a node (`spec.nodeName`) with whole GPUs"),
    ({}, "pods.validate.gpushare.io", "or a near miss"),
    ({"rules": {"GS007": {"enabled": False}}}, "pods.mutate.gpushare.io", "asking for `aliyun.com/gpu-mem`"),
    ({}, "workloads.validate.gpushare.io", "an UPDATE only when it changes a judged part"),
    ({}, "new-nodes.validate.gpushare.io", "now or before) | Fail"),
    ({}, "cronjobs.validate.gpushare.io", "none a controller made; an UPDATE only when it changes a judged part"),
    ({}, "debug-containers.validate.gpushare.io", "setting one of"),
    # Every UPDATE of a quota naming a GPU resource is sent (its condition has no judged-change test).
    ({}, "quotas.validate.gpushare.io", ": only those naming a GPU resource (every ElasticQuotaTree: CEL cannot walk "
                                        "its tree) | Fail"),
])
def test_each_scope_is_described_by_what_its_rules_declare(config, name, words):
    hook = _hook(name, "Fail", [(["CREATE"], ["pods"])], "true")
    row = outage_table({"base": [("validating", hook)]}, Settings(**config)).splitlines()[2]
    assert words in row, row
