"""Large inputs fan out over processes; the report must not change by a byte."""

from __future__ import annotations

import pytest

from tests.support.check_helpers import write_yaml
from tests.support.manifests import CORE, MEM, container, pod_spec, workload
from webhook.report import checking
from webhook.report.checking import Checker


def _tree(root) -> list[tuple[str, str]]:
    paths = []
    for i in range(12):
        docs = [workload("Job", pod_spec(container("c", limits={MEM: 1, CORE: 30 + i})), name=f"j{i}"),
                workload("Pod", pod_spec(container("c", limits={MEM: "1Gi" if i % 3 == 0 else 1})), name=f"p{i}")]
        path = write_yaml(root / f"f{i:02d}.yaml", *docs)
        paths.append((str(path), str(path)))
    (root / "broken.yaml").write_text("kind: Pod\nmetadata: {name: x\n")
    paths.append((str(root / "broken.yaml"), "broken.yaml"))
    return paths


@pytest.mark.processes
def test_the_process_pool_yields_what_one_process_does(tmp_path, engine, monkeypatch):
    paths = _tree(tmp_path)
    checker = Checker(engine)
    serial = list(checker.check_paths(paths))
    monkeypatch.setattr(checking, "PARALLEL_MIN_FILES", 2)
    monkeypatch.setattr(checking, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(checking.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    assert checking._worker_count(paths) == 2
    parallel = list(checker.check_paths(paths))
    assert parallel == serial
    assert sum(len(r.objects) for r in serial) == 24 and serial[-1].problems[0].line == 2
    assert sum(len(o.findings) for r in serial for o in r.objects) == 12 - 3 + 4  # GS001 (not 30/35/40), GS003


@pytest.mark.parametrize("paths", [[("-", "<stdin>")] * 100, [("a.yaml", "a.yaml")]])
def test_stdin_and_small_inputs_stay_in_one_process(paths):
    assert checking._worker_count(paths) == 1
