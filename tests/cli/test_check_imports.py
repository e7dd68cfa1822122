"""What `gpushare check` loads, read from the real process (its sys.modules at exit): no other
command's modules, nothing of the [server] extra, and of the domain only what the objects in hand
need (docs/check.md, "Speed"). Names, not timings: the start-up figures are bench/check.py's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.check_helpers import SEED_OK
from tests.support.helpers import DATA, gpushare_executable
from webhook.cli.common import SERVER_MODULES

pytestmark = pytest.mark.processes

# Beside the [server] extra (webhook.cli.common.SERVER_MODULES): the other commands' rooms and what
# only a config mistake, JSON output, a large input or a GPUSHARE_* variable needs.
NOT_FOR_PODS = (
    "rich", "msgspec", "jsonschema", "jsonpatch", "pydantic_settings", "multiprocessing", "difflib",
    "importlib.metadata", "webhook.state", "webhook.routes", "webhook.server", "webhook.serving",
    "webhook.dashboard", "webhook.cli.serve", "webhook.cli.score", "webhook.cli.inspect", "webhook.cli.audit",
)
# The domain's machinery for nodes, placements and GC001: loaded when a node or a snapshot is judged.
CLUSTER_ONLY = ("policies.model.cluster", "policies.model.cluster_manifests", "policies.model.cluster_snapshot",
                "policies.placement.cards", "policies.placement.card_choice", "policies.placement.placement",
                "policies.placement.capacity", "policies.placement.capacity_index", "policies.placement.node_groups",
                "policies.placement.work_budget", "policies.placement.topology",
                "policies.placement.assume", "policies.model.catalog", "policies.model.compatibility",
                "policies.model.ecs", "policies.scoring.scoring")
NODE = """\
apiVersion: v1
kind: Node
metadata:
  name: gpu-1
  labels: {ack.node.gpu.schedule: cgpu}
spec: {providerID: cn-beijing.i-2ze0a1b2c3d4e5f6g7h8}
"""


# Runs the installed console script as its own process would, and writes sys.modules when it exits
# (-X importtime would miss modules loaded through importlib.import_module, as commands are).
PROBE = ("import atexit, runpy, sys\n"
         "out = sys.argv.pop(1)\n"
         "sys.argv = sys.argv[1:]\n"
         "atexit.register(lambda: open(out, 'w').write('\\n'.join(sorted(sys.modules))))\n"
         "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def loaded_by(*args: str | Path, cwd: Path) -> set[str]:
    """Every module the installed `gpushare` has imported when it exits, run with ``args``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUSHARE_")}
    out = cwd / "modules.txt"
    done = subprocess.run([sys.executable, "-c", PROBE, str(out), gpushare_executable(), *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=environment, timeout=60, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    names = set(out.read_text().splitlines())
    assert "policies.admission.engine" in names
    return names


def within(names: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes))


def test_check_on_pods_loads_neither_the_server_nor_the_cluster_machinery(tmp_path: Path) -> None:
    names = loaded_by("check", *SEED_OK, cwd=tmp_path)
    assert within(names, (*SERVER_MODULES, *NOT_FOR_PODS)) == []
    assert within(names, CLUSTER_ONLY) == []
    assert {"policies.rules.node_rules", "policies.rules.capacity_rules", "webhook.report.text_format"} <= names


def test_a_node_or_a_snapshot_loads_what_judging_them_needs(tmp_path: Path) -> None:
    node = tmp_path / "node.yaml"
    node.write_text(NODE)
    assert within(loaded_by("check", node, cwd=tmp_path), CLUSTER_ONLY) == [
        "policies.model.catalog", "policies.model.cluster", "policies.model.cluster_manifests",
        "policies.model.compatibility", "policies.model.ecs"]
    snapshot = loaded_by("check", "--snapshot", DATA / "inspect-seed001.yaml", *SEED_OK, cwd=tmp_path)
    assert {"policies.model.cluster", "policies.placement.placement", "policies.placement.capacity_index"} <= snapshot
    assert within(snapshot, tuple(SERVER_MODULES)) == []
