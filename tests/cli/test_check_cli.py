"""``gpushare check`` as CI runs it: the installed command over real files, stdin and formats."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft4Validator
from rfc3986_validator import validate_rfc3986

from policies.admission.engine import Engine
from policies.model.sources import cite
from policies.rules.base import REGISTRY
from tests.support.check_helpers import SEED_33, SEED_OK, check_json, line_of, run_gpushare, write_yaml
from tests.support.helpers import DATA, gpushare_executable
from tests.support.manifests import CORE, MEM, container, pod_spec, workload
from webhook.settings import load_settings

pytestmark = pytest.mark.processes

NOT_RUN = ("not run: cluster-aware rules GB001-GB005, GC001, GN006, GQ005 need --snapshot FILE "
           "(`kubectl get nodes,pods,resourcequotas -A -o yaml`)")
GS001_33 = ('GS001: Job default/cuda-sample-33 container "cuda-sample": aliyun.com/gpu-core.percentage=33 '
            "is not a multiple of 5 in 5..100; use 30 or 35")


def test_the_three_seed_jobs_pass():
    done = run_gpushare("check", *SEED_OK)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["ok: 0 denials, 0 warnings in 3 objects from 3 files", NOT_RUN]
    assert done.stderr == ""


def test_seed_000_with_33_percent_fails_with_gs001_at_its_file_and_line():
    done = run_gpushare("check", SEED_33)
    assert done.returncode == 1
    line = line_of(SEED_33, "gpu-core.percentage: 33")
    document = line_of(SEED_33, "apiVersion: batch/v1")
    assert done.stdout.splitlines()[0] == f"{SEED_33}:{line}: deny {GS001_33} (document at line {document})"
    code, report = check_json(SEED_33)
    assert code == 1
    [finding] = report["findings"]
    assert (finding["rule"], finding["file"], finding["line"]) == ("GS001", str(SEED_33), line)
    assert finding["documentLine"] == document
    assert finding["field"] == 'spec.template.spec.containers[0].resources.limits["aliyun.com/gpu-core.percentage"]'
    assert finding["object"] == {"kind": "Job", "name": "cuda-sample-33", "namespace": "default"}


@pytest.mark.parametrize(("text", "line", "reason"), [
    ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers: [\n", 6, "invalid YAML"),
    ("kind: Pod\nmetadata:\n\tname: p\n", 3, "invalid YAML"),
    ("---\nkind: Pod\n---\nkind: Job\nmetadata: {name: j\n", 5, "invalid YAML"),
])
def test_broken_yaml_exits_2_with_one_line_naming_file_and_line(tmp_path, text, line, reason):
    bad = tmp_path / "broken.yaml"
    bad.write_text(text)
    done = run_gpushare("check", SEED_OK[0], bad)
    assert done.returncode == 2
    errors = done.stderr.splitlines()
    assert len(errors) == 1 and errors[0].startswith(f"gpushare: error: {bad}:{line}: {reason}"), done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_stdin_is_read_for_dash_and_named_by_stdin_filename():
    text = SEED_33.read_text()
    done = run_gpushare("check", "-", stdin=text)
    assert done.returncode == 1
    line = line_of(SEED_33, "gpu-core.percentage: 33")
    document = line_of(SEED_33, "apiVersion: batch/v1")
    assert done.stdout.splitlines()[0] == f"<stdin>:{line}: deny {GS001_33} (document at line {document})"
    ok = run_gpushare("check", "--stdin-filename", "rendered.yaml", "-",
                      stdin="".join(p.read_text() + "---\n" for p in SEED_OK))
    assert ok.returncode == 0 and "in 3 objects from 1 file" in ok.stdout


def test_helm_style_stream_with_lists_and_empty_documents(tmp_path):
    """Multi-document YAML as `helm template` prints it: comments, empty documents, a List."""
    bad_job = workload("Job", pod_spec(container("trainer", limits={MEM: "2Gi"})), name="bad-mem")
    listed = {"apiVersion": "v1", "kind": "List", "items": [
        workload("Deployment", pod_spec(container("ok", limits={MEM: 1, CORE: 10})), name="fine"),
        workload("Pod", pod_spec(container("core-only", limits={CORE: 50})), name="no-mem"),
    ]}
    stream = ("# Source: chart/templates/svc.yaml\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
              "---\n---\n# Source: chart/templates/job.yaml\n" + yaml.safe_dump(bad_job, sort_keys=False)
              + "---\n" + yaml.safe_dump(listed, sort_keys=False))
    (tmp_path / "stream.yaml").write_text(stream)
    code, report = check_json("-", stdin=stream)
    assert code == 1
    assert report["summary"]["objects"] == 3 and report["summary"]["skipped"] == 1
    by_rule = {f["rule"]: f for f in report["findings"]}
    assert sorted(by_rule) == ["GS002", "GS003"]
    assert by_rule["GS003"]["line"] == line_of(tmp_path / "stream.yaml", "aliyun.com/gpu-mem: 2Gi")
    assert by_rule["GS003"]["documentLine"] == line_of(tmp_path / "stream.yaml", "kind: Job") - 1
    assert "use 2" in by_rule["GS003"]["message"]
    assert by_rule["GS002"]["object"]["name"] == "no-mem"
    assert by_rule["GS002"]["line"] == line_of(tmp_path / "stream.yaml", "aliyun.com/gpu-core.percentage: 50")


def _tree(root: Path) -> None:
    """A repository layout: nested manifests, a Helm chart, hidden and unrelated files."""
    bad = workload("Pod", pod_spec(container("c", limits={MEM: 1, CORE: 33})), name="bad")
    write_yaml(root / "apps" / "team-a" / "bad.yml", bad)
    (root / "apps" / "team-a" / "good.json").write_text(json.dumps(
        workload("StatefulSet", pod_spec(container("c", limits={MEM: 4})), name="good")))
    write_yaml(root / "apps" / "cron.yaml", workload("CronJob", pod_spec(container("c", limits={MEM: 1})), "cj"))
    (root / "apps" / "notes.txt").write_text("kind: Pod\n  broken: [")
    (root / ".github" / "workflows").mkdir(parents=True)
    (root / ".github" / "workflows" / "ci.yaml").write_text("on: [push\n")
    chart = root / "charts" / "gpu"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: gpu\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("replicas: 1\n")
    (chart / "templates" / "job.yaml").write_text("kind: Job\nmetadata:\n  name: {{ .Release.Name }}\n")


def test_directories_are_searched_recursively_skipping_hidden_and_helm_templates(tmp_path):
    _tree(tmp_path)
    done = run_gpushare("check", "--format", "json", ".", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["files"] == 5  # bad.yml, good.json, cron.yaml, Chart.yaml, values.yaml
    assert report["summary"]["objects"] == 3
    [finding] = report["findings"]
    assert finding["file"] == "./apps/team-a/bad.yml" and finding["rule"] == "GS001"
    assert "charts/gpu/templates: skipped Helm chart templates" in done.stderr
    # A template named explicitly is passed over too (pre-commit names every changed file).
    helm = run_gpushare("check", "charts/gpu/templates/job.yaml", "apps/cron.yaml", cwd=tmp_path)
    assert helm.returncode == 0 and "skipped Helm chart template" in helm.stderr
    excluded = run_gpushare("check", "--exclude", "*/team-a/*", ".", cwd=tmp_path)
    assert excluded.returncode == 0, excluded.stdout


def test_missing_path_unreadable_and_non_utf8_input_exit_2(tmp_path):
    missing = run_gpushare("check", tmp_path / "nope.yaml")
    assert missing.returncode == 2
    assert missing.stderr == f"gpushare: error: {tmp_path / 'nope.yaml'}: no such file or directory\n"
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"kind: Pod\nmetadata:\n  name: caf\xe9\n")
    done = run_gpushare("check", latin)
    assert done.returncode == 2 and done.stderr.startswith(f"gpushare: error: {latin}:3: not UTF-8 text")
    usage = run_gpushare("check", "--format", "xml", SEED_33)
    assert usage.returncode == 2 and len(usage.stderr.splitlines()) == 1 and "xml" in usage.stderr
    none = run_gpushare("check")
    assert none.returncode == 2 and len(none.stderr.splitlines()) == 1


def test_an_object_of_the_wrong_shape_is_an_input_error_at_its_line(tmp_path):
    path = tmp_path / "shape.yaml"
    path.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    name: c\n")
    done = run_gpushare("check", path)
    assert done.returncode == 2
    assert done.stderr.startswith(f"gpushare: error: {path}:5: Pod: spec.containers: must be a list"), done.stderr


def _many_findings(tmp_path: Path) -> Path:
    return write_yaml(
        tmp_path / "many.yaml",
        workload("Job", pod_spec(container("a", limits={MEM: 1, CORE: 33})), name="j33"),
        workload("Pod", pod_spec(container("b", limits={MEM: "2Gi", CORE: 7})), name="p2"),
        workload("Deployment", pod_spec(container("ok", limits={MEM: 2})), name="fine"),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "data": {"a": "b"}},
    )


def test_sarif_validates_against_the_sarif_2_1_0_schema(tmp_path):
    many = _many_findings(tmp_path)
    done = run_gpushare("check", "--format", "sarif", many, SEED_33, "-", stdin=SEED_OK[0].read_text())
    assert done.returncode == 1
    log = json.loads(done.stdout)
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    errors = sorted(Draft4Validator(schema, format_checker=Draft4Validator.FORMAT_CHECKER).iter_errors(log),
                    key=str)
    assert errors == []
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(REGISTRY)
    for descriptor in rules:
        assert descriptor["shortDescription"]["text"] and descriptor["help"]["text"]
        assert descriptor["defaultConfiguration"]["level"] == {"deny": "error", "warn": "warning"}[
            REGISTRY[descriptor["id"]].severity]
    results = run["results"]
    assert sorted(r["ruleId"] for r in results) == ["GS001", "GS001", "GS001", "GS003"]
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert validate_rfc3986(uri, rule="URI_reference"), uri
    gs003 = next(r for r in results if r["ruleId"] == "GS003")
    assert gs003["locations"][0]["physicalLocation"]["region"]["startLine"] == line_of(many, "2Gi")
    assert run["invocations"][0]["executionSuccessful"] is True


def test_junit_has_one_failing_testcase_per_finding(tmp_path):
    many = _many_findings(tmp_path)
    code, report = check_json(many, *SEED_OK)
    done = run_gpushare("check", "--format", "junit", many, *SEED_OK)
    assert code == done.returncode == 1
    root = ET.fromstring(done.stdout)
    failing = [case for case in root.iter("testcase") if case.find("failure") is not None]
    assert len(failing) == len(report["findings"]) == 3
    assert sorted(case.find("failure").get("type") for case in failing) == ["GS001", "GS001", "GS003"]
    assert int(root.get("failures")) == 3
    assert int(root.get("tests")) == 3 + 1 + 3  # findings, the clean Deployment, the seed Jobs
    for case in failing:
        assert int(case.get("line")) > 1 and case.get("file") == str(many)


def test_github_format_is_workflow_commands():
    done = run_gpushare("check", "--format", "github", SEED_33, *SEED_OK)
    assert done.returncode == 1
    line = line_of(SEED_33, "gpu-core.percentage: 33")
    # Properties escape ":" and ","; the message keeps them.
    assert done.stdout.splitlines()[0] == f"::error file={SEED_33},line={line},title=GS001::{GS001_33}"


def test_fail_on_warn_counts_warnings(tmp_path):
    pod = workload("Pod", pod_spec(container("c", limits={MEM: 1})), name="typo")
    pod["metadata"]["annotations"] = {"gpushare.io/exempt": "GS999", "gpushare.io/exempt-reason": "typo"}
    path = write_yaml(tmp_path / "warn.yaml", pod)
    code, report = check_json(path)
    # GE001 twice: the namespace does not allow exemptions, and GS999 is unknown.
    assert code == 0 and [f["rule"] for f in report["findings"]] == ["GE001", "GE001"]
    assert all(f["severity"] == "warn" and f["fails"] is False for f in report["findings"])
    strict = run_gpushare("check", "--fail-on", "warn", "--format", "github", path)
    assert strict.returncode == 1 and strict.stdout.startswith("::error ")


def test_rules_lists_every_rule_with_id_severity_source_and_explanation(tmp_path):
    done = run_gpushare("rules", "--format", "json")
    assert done.returncode == 0
    listed = {entry["id"]: entry for entry in json.loads(done.stdout)}
    assert set(REGISTRY) <= set(listed) and {"GM001", "GM002", "GM003"} <= set(listed)
    for rule_id, rule in REGISTRY.items():
        assert (listed[rule_id]["severity"], listed[rule_id]["sources"], listed[rule_id]["title"]) == (
            rule.severity, list(cite(rule.seed)), rule.title)
    assert listed["GS001"]["sources"] == ['ACK documentation: "Allocate computing power by scheduling shared GPU"']
    text = run_gpushare("rules").stdout.splitlines()
    assert text[0].split() == ["ID", "SEVERITY", "SOURCE", "CHECKS"]
    gs001 = next(line for line in text if line.startswith("GS001"))
    mark = gs001.split(None, 3)[2]
    assert gs001.split(None, 3) == ["GS001", "deny", mark, REGISTRY["GS001"].title]
    assert f"  {mark} ACK documentation: \"Allocate computing power by scheduling shared GPU\"" in text
    (tmp_path / ".gpushare.yaml").write_text("rules:\n  GS001: {severity: warn}\n  GS002: {enabled: false}\n")
    configured = run_gpushare("rules", cwd=tmp_path).stdout
    assert "GS001  warn (default deny)" in configured and "GS002  off" in configured


def test_colour_on_a_terminal_unless_no_color(tmp_path):
    def run_on_tty(env: dict[str, str]) -> str:
        leader, follower = pty.openpty()
        environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
        environment["TERM"] = "xterm-256color"
        with subprocess.Popen([gpushare_executable(), "check", str(SEED_33)], stdout=follower,
                              stderr=subprocess.DEVNULL, env={**environment, **env}) as proc:
            os.close(follower)
            chunks = []
            while True:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the terminal closes when the process exits
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            assert proc.wait(timeout=30) == 1
        os.close(leader)
        return b"".join(chunks).decode()

    coloured = run_on_tty({})
    assert "\x1b[" in coloured and "GS001" in coloured
    plain = run_on_tty({"NO_COLOR": "1"})
    assert "\x1b[" not in plain and GS001_33 in plain
    piped = run_gpushare("check", SEED_33)
    assert "\x1b[" not in piped.stdout
    forced = run_gpushare("check", "--color", "always", SEED_33)
    assert "\x1b[" in forced.stdout
    # docs/check.md: colour styles the same lines, `file:line: severity message` and `FAIL: ...`.
    assert re.sub(r"\x1b\[[0-9;]*m", "", forced.stdout) == piped.stdout


def test_pre_commit_hook_manifest_is_valid_and_its_entry_runs():
    from pre_commit.clientlib import load_manifest

    [hook] = load_manifest(Path(__file__).resolve().parents[2] / ".pre-commit-hooks.yaml")
    assert hook["id"] == "gpushare-check" and hook["language"] == "python"
    assert hook["entry"].split()[0] == "gpushare"
    files = [p for p in [*SEED_OK, DATA / "pod-realistic.json", SEED_33] if re.search(hook["files"], str(p))]
    assert len(files) == 5
    done = run_gpushare(*hook["entry"].split()[1:], *files)
    assert done.returncode == 1 and "GS001" in done.stdout


def test_check_judges_as_the_engine_does():
    """The CLI adds nothing of its own: its findings are the engine's on the parsed object."""
    engine = Engine(load_settings())
    obj = yaml.safe_load(SEED_33.read_text())
    verdict = engine.validate(engine.subject("Job", obj, namespace="default"))
    code, report = check_json(SEED_33)
    assert code == 1
    assert [f["message"] for f in report["findings"]] == [f.message for f in verdict.findings]


def _awkward_inputs(tmp_path: Path) -> list[Path]:
    """An exempted finding, a warning, an input error and a config that overrides severities."""
    exempted = workload("Pod", pod_spec(container("c", limits={MEM: "2Gi"})), name="exempted")
    exempted["metadata"]["annotations"] = {"gpushare.io/exempt": "GS003", "gpushare.io/exempt-reason": "INC-7"}
    files = [write_yaml(tmp_path / "exempted.yaml", exempted), SEED_33, tmp_path / "broken.yaml"]
    files[2].write_text("kind: Pod\nmetadata: {name: x\n")
    config = write_yaml(tmp_path / "config.yaml", {"rules": {"GS001": {"severity": "warn"},
                                                             "GS002": {"enabled": False}},
                                                   "exemptions": {"annotation_namespaces": ["default"]}})
    return [Path("--config"), config, *files]


def test_sarif_with_suppressions_overrides_and_input_errors_still_validates(tmp_path):
    done = run_gpushare("check", "--format", "sarif", *_awkward_inputs(tmp_path))
    assert done.returncode == 2
    log = json.loads(done.stdout)
    schema = json.loads((DATA / "sarif-schema-2.1.0.json").read_text())
    assert list(Draft4Validator(schema, format_checker=Draft4Validator.FORMAT_CHECKER).iter_errors(log)) == []
    run = log["runs"][0]
    [invocation] = run["invocations"]
    assert invocation["executionSuccessful"] is False and invocation["exitCode"] == 2
    [notification] = invocation["toolExecutionNotifications"]
    assert notification["locations"][0]["physicalLocation"]["region"]["startLine"] == 2
    overrides = {o["descriptor"]["id"]: o["configuration"] for o in invocation["ruleConfigurationOverrides"]}
    assert overrides == {"GS001": {"enabled": True, "level": "warning"}, "GS002": {"enabled": False, "level": "error"}}
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert by_rule["GS001"]["level"] == "warning"
    assert by_rule["GS003"]["suppressions"] == [{"kind": "inSource", "status": "accepted", "justification": "INC-7"}]


def test_junit_marks_exemptions_skipped_warnings_passing_and_input_errors_errored(tmp_path):
    done = run_gpushare("check", "--format", "junit", *_awkward_inputs(tmp_path))
    assert done.returncode == 2
    root = ET.fromstring(done.stdout)
    outcome = {case.get("name").split()[0]: [child.tag for child in case] for case in root.iter("testcase")}
    assert outcome == {"GS003": ["skipped"], "GS001": ["system-out"], "read": ["error"]}
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("3", "0", "1", "1")
