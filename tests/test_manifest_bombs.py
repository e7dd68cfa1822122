"""YAML bombs and deep nesting at ``parse_manifests`` (what `gpushare check` and /dry-run use)."""

from __future__ import annotations

import tracemalloc

import pytest

from webhook.manifests import ManifestError, parse_manifests

BILLION_LAUGHS = "\n".join(
    ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: lol}", "data:", '  a: &a ["lol","lol","lol","lol","lol"]']
    + [f"  {chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
       f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]" for i in range(9)]
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BILLION_LAUGHS, "expands to more than"),
        ("kind: Pod\nspec: " + "[" * 5000 + "]" * 5000 + "\n", "nested"),
        ("kind: Pod\nspec:\n" + "".join("  " * i + "a:\n" for i in range(1, 300)), "nested deeper than 100"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ],
    ids=["billion-laughs", "deep-flow-yaml", "deep-block-yaml", "deep-json"],
)
def test_bombs_are_refused_with_file_and_line_in_bounded_memory(text, message):
    tracemalloc.start()
    try:
        with pytest.raises(ManifestError) as refused:
            parse_manifests(text, "bomb.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(refused.value).startswith("bomb.yaml")
    assert message in str(refused.value)
    assert peak < 64 * 1024 * 1024, f"peak {peak / 2**20:.0f} MiB while refusing"


def test_a_few_aliases_are_fine():
    text = "kind: Pod\nmetadata: {name: p, labels: &l {app: x}}\nspec: {containers: [], nodeSelector: *l}\n"
    (manifest,) = parse_manifests(text, "ok.yaml")
    assert manifest.obj["spec"]["nodeSelector"] == {"app": "x"}
