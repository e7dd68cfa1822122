"""`kubectl inspect cgpu`, the command the ACK documents name: our `kubectl-inspect-cgpu` prints the
tables of those documents, `-d` in the open-source plugin's layout, and shares PATH with ACK's binary."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.fake_apiserver import running
from tests.support.helpers import DATA, SEEDS

pytestmark = pytest.mark.processes

BIN = Path(sys.executable).parent
CGPU = str(BIN / "kubectl-inspect-cgpu")


def cgpu(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([CGPU, *args], capture_output=True, text=True, timeout=60, env=env)
    assert "Traceback" not in done.stderr
    return done


def page(number: str) -> str:
    return next(SEEDS.glob(f"{number}_*.txt")).read_text()


def flat(text: str) -> str:
    return " ".join(text.split())


def dashes_as_one(text: str) -> str:
    """The dashed line's length is the open-source plugin's arithmetic, kept apart from these tests."""
    return re.sub(r"-{10,}", "---", text)


def test_manage_component_page_table_line_for_line():
    # "Manage the shared GPU scheduling component" keeps the table's spacing: compare line by line.
    text = page("002")
    start = text.index("    NAME                       IPADDRESS")
    block = text[start:text.index("0/15 (0%)", start) + len("0/15 (0%)")]
    expected = "\n".join(line.removeprefix("    ") for line in block.split("\n")) + "\n"
    done = cgpu("--snapshot", str(DATA / "inspect-seed002.yaml"))
    assert done.returncode == 0, done.stderr
    assert dashes_as_one(done.stdout) == dashes_as_one(expected)


@pytest.mark.parametrize(("number", "snapshot", "total"), [
    ("001", "inspect-seed001-empty.yaml", "0/15 (0%)"),   # Shared GPU scheduling in registered clusters: before
    ("001", "inspect-seed001.yaml", "3/15 (20%)"),        # ... and after the 3 GiB pod
    ("003", "inspect-seed003-binpack.yaml", "24/60 (40%)"),  # GPU node scheduling labels: binpack
    ("003", "inspect-seed003-spread.yaml", "12/60 (20%)"),   # ... and spread
])
def test_documented_tables_word_for_word(number, snapshot, total):
    # These pages lost their spacing when published: the table is the same words in the same order.
    done = cgpu("--snapshot", str(DATA / snapshot))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == total
    assert dashes_as_one(flat(done.stdout)) in dashes_as_one(flat(page(number)))


def test_details_in_the_open_source_plugin_layout():
    done = cgpu("--snapshot", str(DATA / "inspect-seed003-binpack.yaml"), "-d")
    assert done.returncode == 0, done.stderr
    # cmd/inspect/display.go (displayDetails): a NAME:/IPADDRESS: block, the pods by card, the node's
    # "Allocated :"/"Total :" aligned with the pod table, dashes, two blank lines and the cluster total.
    pod_rows = ["binpack-a\tdefault\t8\t0\t0\t0\t\n", "binpack-c\tdefault\t7\t0\t0\t0\t\n",
                "binpack-b\tdefault\t0\t4\t0\t0\t\n", "binpack-d\tdefault\t0\t5\t0\t0\t\n"]
    assert done.stdout == "\n".join([
        "",
        "NAME:       cn-shanghai.192.0.2.109",
        "IPADDRESS:  192.0.2.109",
        "",
        "NAME         NAMESPACE  GPU0(Allocated)  GPU1(Allocated)  GPU2(Allocated)  GPU3(Allocated)",
        "binpack-a    default    8                0                0                0",
        "binpack-c    default    7                0                0                0",
        "binpack-b    default    0                4                0                0",
        "binpack-d    default    0                5                0                0",
        "Allocated :  24 (40%)",
        "Total :      60",
        "-" * (len("".join(pod_rows)) + 10),
        "",
        "",
        "Allocated/Total GPU Memory In Cluster:  24/60 (40%)",
    ]) + "\n"


def test_kubeconfig_from_the_environment_as_ack_reads_it(tmp_path):
    objects = yaml.safe_load((DATA / "inspect-seed003-spread.yaml").read_text())["items"]
    with running() as api:
        api.add(*objects)
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        # "Manage the shared GPU scheduling component": the ACK tool reads only $KUBECONFIG.
        # (--kubeconfig, as `gpushare inspect` takes it, is tested in test_inspect.py: the same command.)
        via_env = cgpu(env={**os.environ, "KUBECONFIG": kubeconfig})
    assert via_env.returncode == 0, via_env.stderr
    assert via_env.stdout == cgpu("--snapshot", str(DATA / "inspect-seed003-spread.yaml")).stdout


def test_shares_path_with_acks_own_binary_first_one_wins(tmp_path):
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is part of the machine image; the plugin test needs it"
    ack = tmp_path / "ack-bin"
    ack.mkdir()
    stand_in = ack / "kubectl-inspect-cgpu"  # where ACK's downloaded binary would be
    stand_in.write_text("#!/bin/sh\necho ack-binary\n")
    stand_in.chmod(0o755)
    snapshot = ["--snapshot", str(DATA / "inspect-seed002.yaml")]

    def run(*path: Path) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": os.pathsep.join([*map(str, path), os.environ["PATH"]])}
        return subprocess.run([kubectl, "inspect", "cgpu", *snapshot], capture_output=True, text=True, env=env,
                              timeout=60)

    ours_first = run(BIN, ack)
    assert ours_first.returncode == 0, ours_first.stderr
    assert ours_first.stdout == cgpu(*snapshot).stdout
    assert run(ack, BIN).stdout == "ack-binary\n"
    env = {**os.environ, "PATH": os.pathsep.join([str(BIN), str(ack), os.environ["PATH"]])}
    listed = subprocess.run([kubectl, "plugin", "list"], capture_output=True, text=True, env=env, timeout=60)
    assert f"{stand_in} is overshadowed by a similarly named plugin: {CGPU}" in listed.stdout + listed.stderr
