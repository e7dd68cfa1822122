"""`gpushare inspect` / `kubectl inspect gpushare` reproduce the seeds' `kubectl inspect cgpu` tables."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.fake_apiserver import FakeApiServer, running
from tests.support.helpers import DATA, SEEDS, gpushare_executable
from webhook.settings import Settings
from webhook.state.cluster_read import read_cluster
from webhook.state.kube_client import api_client

pytestmark = pytest.mark.processes

BIN = Path(sys.executable).parent


def seed_text(number: str) -> str:
    return next(SEEDS.glob(f"{number}_*.txt")).read_text()


def flat(text: str) -> str:
    """Whitespace collapsed, as the seeds' flattened tables read."""
    return " ".join(text.split())


def inspect(*args: str, program: str = "gpushare") -> subprocess.CompletedProcess[str]:
    command = [gpushare_executable(), "inspect"] if program == "gpushare" else [str(BIN / program)]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)


def test_seed_002_table_character_for_character():
    # "Manage the shared GPU scheduling component": the table as printed, dashes included, no normalising.
    seed = seed_text("002")
    start = seed.index("    NAME                       IPADDRESS")
    block = seed[start:seed.index("0/15 (0%)", start) + len("0/15 (0%)")]
    expected = "\n".join(line.removeprefix("    ") for line in block.split("\n")) + "\n"
    done = inspect("--snapshot", str(DATA / "inspect-seed002.yaml"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected


@pytest.mark.parametrize(("snapshot", "table"), [
    ("inspect-seed001-empty.yaml", "NAME IPADDRESS GPU0(Allocated/Total) GPU Memory(GiB) cn-zhangjiakou.192.168.66.139 "
                                   "192.168.66.139 0/15 0/15 " + "-" * 75 + " Allocated/Total GPU Memory In Cluster: "
                                   "0/15 (0%)"),
    ("inspect-seed001.yaml", "NAME IPADDRESS GPU0(Allocated/Total) GPU Memory(GiB) cn-zhangjiakou.192.168.66.139 "
                             "192.168.66.139 3/15 3/15 " + "-" * 75 + " Allocated/Total GPU Memory In Cluster: "
                             "3/15 (20%)"),
])
def test_seed_001_tables_modulo_whitespace(snapshot, table):
    # "Shared GPU scheduling in registered clusters" lost its whitespace when scraped: compare
    # with runs of whitespace collapsed, dashes and all (before and after the 3 GiB pod).
    assert table in flat(seed_text("001"))
    done = inspect("--snapshot", str(DATA / snapshot))
    assert done.returncode == 0, done.stderr
    assert flat(done.stdout) == table


@pytest.mark.parametrize(("placement", "row", "total"), [
    ("binpack", "15/15 9/15 0/15 0/15 24/60", "24/60 (40%)"),
    ("spread", "4/15 4/15 0/15 4/15 12/60", "12/60 (20%)"),
])
def test_seed_003_binpack_and_spread(placement, row, total):
    done = inspect("--snapshot", str(DATA / f"inspect-seed003-{placement}.yaml"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert flat(lines[0]) == ("NAME IPADDRESS GPU0(Allocated/Total) GPU1(Allocated/Total) GPU2(Allocated/Total) "
                              "GPU3(Allocated/Total) GPU Memory(GiB)")
    assert flat(lines[1]) == f"cn-shanghai.192.0.2.109 192.0.2.109 {row}"
    assert lines[-1] == total
    # ... exactly as seed 003 prints them
    assert f"{flat(lines[1])} " in flat(seed_text("003")) and f"{total} " in flat(seed_text("003"))


def test_details_show_each_pod_on_its_card_and_skip_finished_pods():
    done = inspect("--snapshot", str(DATA / "inspect-seed003-binpack.yaml"), "-d")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines() if line.startswith("binpack-")}
    assert rows == {"binpack-a": ["default", "8", "0", "0", "0"], "binpack-b": ["default", "0", "4", "0", "0"],
                    "binpack-c": ["default", "7", "0", "0", "0"], "binpack-d": ["default", "0", "5", "0", "0"]}
    assert "Allocated :  24 (40%)" in done.stdout and done.stdout.endswith("24/60 (40%)\n")


def test_json_output():
    done = inspect("--snapshot", str(DATA / "inspect-seed003-spread.yaml"), "-o", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["cluster"] == {"allocatedMemGiB": 12, "totalMemGiB": 60, "percent": 20}
    (node,) = report["nodes"]
    assert [g["allocatedMemGiB"] for g in node["gpus"]] == [4, 4, 0, 4]
    assert node["placement"] == "spread" and node["ipAddress"] == "192.0.2.109"
    assert {p["name"]: p["memGiBByGPU"] for p in node["pods"]} == {
        "spread-a": {"0": 4}, "spread-b": {"1": 4}, "spread-c": {"3": 4}}


def test_core_mem_nodes_show_compute_per_card():
    demo = Path(__file__).parents[2] / "webhook" / "data" / "demo-snapshot.yaml"
    done = inspect("--snapshot", str(demo))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = lines[0].split("  ")
    assert [h.strip() for h in header if h.strip()][-4:] == ["GPU0 Core(%)", "GPU1 Core(%)", "GPU2 Core(%)",
                                                            "GPU3 Core(%)"]
    core_mem = next(line for line in lines if line.startswith("cn-beijing."))
    assert core_mem.split()[-5:] == ["2/60", "30/100", "0/100", "0/100", "0/100"]
    cgpu = next(line for line in lines if line.startswith("cn-hangzhou."))
    assert cgpu.split()[-5:] == ["0/62", "-", "-", "-", "-"]  # no compute allocation outside core_mem
    only = inspect("--snapshot", str(demo), "cn-zhangjiakou.192.168.66.139")
    assert len(only.stdout.splitlines()) == 5 and "Core" not in only.stdout


def test_kubectl_plugin_entry_point_and_kubectl_discovery():
    snapshot = str(DATA / "inspect-seed003-binpack.yaml")
    direct = inspect("--snapshot", snapshot)
    plugin = inspect("--snapshot", snapshot, program="kubectl-inspect-gpushare")
    assert plugin.returncode == 0 and plugin.stdout == direct.stdout
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is part of the machine image; the plugin test needs it"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    via_kubectl = subprocess.run([kubectl, "inspect", "gpushare", "--snapshot", snapshot], capture_output=True,
                                 text=True, env=env, timeout=60)
    assert via_kubectl.returncode == 0, via_kubectl.stderr
    assert via_kubectl.stdout == direct.stdout


def objects(snapshot: str) -> list[dict]:
    return yaml.safe_load((DATA / snapshot).read_text())["items"]


def test_live_cluster_matches_the_snapshot(tmp_path):
    with running() as api:
        api.add(*objects("inspect-seed003-binpack.yaml"), *objects("inspect-seed001.yaml"))
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        live = inspect("--kubeconfig", kubeconfig)
        assert live.returncode == 0, live.stderr
        lines = live.stdout.splitlines()
        assert flat(lines[1]).endswith("15/15 9/15 0/15 0/15 24/60")
        assert flat(lines[2]) == "cn-zhangjiakou.192.168.66.139 192.168.66.139 3/15 - - - 3/15"
        assert lines[-1] == "27/75 (36%)"
        # KUBECONFIG from the environment works too (seed 002: kubectl inspect cgpu only reads that).
        env = {**os.environ, "KUBECONFIG": kubeconfig}
        via_env = subprocess.run([gpushare_executable(), "inspect", "-o", "json"], capture_output=True, text=True,
                                 env=env, timeout=60)
        assert json.loads(via_env.stdout)["cluster"]["allocatedMemGiB"] == 27


def test_live_read_pages_through_large_lists(tmp_path):
    with running() as api:
        api.add(*objects("inspect-seed003-binpack.yaml"))
        client = api_client(api.kubeconfig(tmp_path / "kubeconfig"))
        state = read_cluster(client, Settings().names, page_size=2)
        pod_reads = [r.query for r in api.requests if r.path == "/api/v1/pods"]
        assert len(pod_reads) == 3 and all(q.get("limit") == "2" for q in pod_reads)
        assert sum("continue" in q for q in pod_reads) == 2
        assert sorted(p.name for p in state.pods()) == ["binpack-a", "binpack-b", "binpack-c", "binpack-d",
                                                        "binpack-done"]


def test_errors_are_one_line_with_exit_codes(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("items:\n  - kind: Node\n    metadata: {name: [\n")
    done = inspect("--snapshot", str(bad))
    assert done.returncode == 2 and re.search(r"bad\.yaml:\d+: invalid YAML", done.stderr)
    done = inspect("--snapshot", str(DATA / "inspect-seed001.yaml"), "no-such-node")
    assert done.returncode == 2 and "no such node: no-such-node" in done.stderr
    gone = FakeApiServer().start()
    gone.kubeconfig(tmp_path / "kc")
    gone.stop()  # nothing listens on its port any more
    done = inspect("--kubeconfig", str(tmp_path / "kc"))
    assert done.returncode == 2 and "cannot reach the API server http://127.0.0.1:" in done.stderr
    assert done.stderr.endswith(": connection refused\n"), done.stderr
    assert "Traceback" not in done.stderr
    done = inspect("--kubeconfig", str(tmp_path / "absent"))
    assert done.returncode == 2 and f"cannot read kubeconfig {tmp_path / 'absent'}: no such file" in done.stderr
    assert "--snapshot" in done.stderr
