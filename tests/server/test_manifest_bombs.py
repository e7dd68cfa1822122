"""YAML bombs and deep nesting at ``parse_manifests`` (what `gpushare check` and /dry-run use)."""

from __future__ import annotations

import tracemalloc

import pytest

from webhook.documents.manifests import ManifestError, parse_manifests

BILLION_LAUGHS = "\n".join(
    ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: lol}", "data:", '  a: &a ["lol","lol","lol","lol","lol"]']
    + [f"  {chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
       f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]" for i in range(9)]
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BILLION_LAUGHS, "aliases expand the input by more than"),
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


BOMBS = {
    "billion-laughs": (BILLION_LAUGHS, "aliases expand the input by more than"),
    "deep-block-yaml": ("kind: Pod\nspec:\n" + "".join("  " * i + "a:\n" for i in range(1, 300)),
                        "nested deeper than 100"),
    "deep-json": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
}


@pytest.mark.processes
@pytest.mark.parametrize("name", sorted(BOMBS))
def test_check_cli_refuses_bombs_with_exit_2_and_one_line(tmp_path, name):
    import subprocess

    from tests.support.helpers import gpushare_executable

    text, message = BOMBS[name]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(text)
    result = subprocess.run([gpushare_executable(), "check", str(bomb)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if str(bomb) in line]
    assert errors and message in errors[0], result.stderr


@pytest.fixture(scope="module")
def dry_run_server(tmp_path_factory):
    from tests.support.helpers import gpushare_server

    with gpushare_server(tmp_path_factory.mktemp("bombs")) as running:
        yield running


@pytest.mark.processes
@pytest.mark.parametrize("name", sorted(BOMBS))
def test_dry_run_refuses_bombs_with_a_400(dry_run_server, name):
    text, message = BOMBS[name]
    with dry_run_server.session() as session:
        reply = session.post(dry_run_server.url + "/dry-run", data=text.encode(),
                             headers={"Content-Type": "application/yaml"}, timeout=30)
        assert reply.status_code == 400, reply.text
        assert message in reply.json()["error"]["reason"]
        # The server is still fine afterwards.
        assert session.get(dry_run_server.url + "/healthz", timeout=10).status_code == 200


@pytest.mark.parametrize("text", [
    "a: 1\nb: 2\na: 3\n",  # a duplicate key
    "kind: Pod\nmetadata:\n  labels: {x: 1, y: 2, x: 3}\n",
    "a: " + "[" * 101 + "]" * 101 + "\n",  # one level past max_depth, in flow style
    "".join("  " * i + f"k{i}:\n" for i in range(101)) + "  " * 101 + "v\n",  # ... and in block style
    "a: " + "[" * 2000 + "]" * 2000 + "\n",  # past libyaml's own limit
    "<<: {a: 1}\n<<: {b: 2}\nkind: Pod\n",  # merge keys may repeat
])
def test_own_files_without_anchors_meet_the_same_bounds(text):
    """`check` reads the user's files without the event pass when they hold no anchor: the same
    text is refused, at the same line and in the same words, or read alike."""
    from webhook.documents.manifests import read_manifest_file

    try:
        expected = [m.obj for m in parse_manifests(text, "f.yaml")]
    except ManifestError as refused:
        with pytest.raises(ManifestError) as also:
            read_manifest_file(text, "f.yaml")
        assert (also.value.line, also.value.reason) == (refused.line, refused.reason)
    else:
        assert [m.obj for m in read_manifest_file(text, "f.yaml").manifests] == expected
