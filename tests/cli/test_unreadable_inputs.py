"""Every command, every unreadable input: exit 2, one line naming it, never a traceback.

"No permission" is a file the process may not read. Tests usually run as root here, and root
reads any file whatever its mode, so as root the input is ``/proc/sys/vm/drop_caches``: the
kernel lets nobody read it (mode 0200, no read operation), root included.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.check_helpers import SEED_OK, run_gpushare
from tests.support.helpers import DATA, gpushare_executable

pytestmark = pytest.mark.processes

KINDS = ("missing", "directory", "not YAML", "wrong shape", "no permission")
DIR_KINDS = ("a file", "not PEM", "no permission")  # for certificate directories
GOOD_SNAPSHOT = DATA / "inspect-seed001.yaml"


def make_input(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "input.yaml"
    if kind == "missing":
        return tmp_path / "missing.yaml"
    if kind == "directory":
        path = tmp_path / "a-directory"
        path.mkdir()
        (path / "x.yaml").write_text("a: [\n")
        return path
    if kind == "no permission":
        if os.geteuid() == 0:
            return Path("/proc/sys/vm/drop_caches")
        path.write_text("{}\n")
        path.chmod(0)
        return path
    content = {"not YAML": b"a: [\n  b\n", "wrong shape": b"just some words\n"}[kind]
    path.write_bytes(content)
    return path


def make_pem_dir(tmp_path: Path, kind: str) -> Path:
    """A certificate directory that cannot be used: a file, material that is not PEM, unreadable."""
    if kind == "a file":
        return make_input(tmp_path, "wrong shape")
    folder = tmp_path / "certs"
    folder.mkdir()
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key", "ca-bundle.crt"):
        target = folder / name
        if kind == "no permission" and os.geteuid() == 0:
            target.symlink_to("/proc/sys/vm/drop_caches")
        else:
            target.write_text("just some words\n")
            if kind == "no permission":
                target.chmod(0)
    return folder


POD = str(SEED_OK[0])
SNAP = str(GOOD_SNAPSHOT)
# (command with {} for the input, which kinds apply, how the input is made)
COMMANDS = [
    ("check {}", KINDS, make_input),
    ("check --config {} " + POD, KINDS, make_input),
    ("check --snapshot {} " + POD, KINDS, make_input),
    ("score {}", KINDS, make_input),
    ("score --snapshot {} " + POD, KINDS, make_input),
    ("rules --config {}", KINDS, make_input),  # score and inspect read --config the same way
    ("inspect --snapshot {}", KINDS, make_input),
    ("inspect --kubeconfig {}", KINDS, make_input),
    ("serve --port 0 --config {}", KINDS, make_input),
    ("serve --port 0 --snapshot {}", KINDS, make_input),
    ("serve --port 0 --kubeconfig {}", KINDS, make_input),
    ("serve --port 0 --cert-dir {}", DIR_KINDS, make_pem_dir),
    ("certs issue --cert-dir CERTS --config {}", KINDS, make_input),
    ("certs issue --secrets --kubeconfig {}", KINDS, make_input),
    ("certs rotate --cert-dir {}", DIR_KINDS, make_pem_dir),
    ("certs rotate --secrets --kubeconfig {}", KINDS, make_input),
    ("certs inject --ca-bundle {}", KINDS, make_input),
    ("certs inject --cert-dir {}", DIR_KINDS, make_pem_dir),
    ("certs inject --secrets --kubeconfig {}", KINDS, make_input),
    ("kubectl-inspect-gpushare --kubeconfig {}", KINDS, make_input),
    ("audit --snapshot {}", KINDS, make_input),
    ("explain --snapshot {} some-pod", KINDS, make_input),
    ("dashboard --port 0 --snapshot {}", KINDS, make_input),
]
CASES = [pytest.param(command, kind, maker, id=f"{command.split(' {}')[0]} [{kind}]")
         for command, kinds, maker in COMMANDS for kind in kinds]


@pytest.mark.parametrize(("command", "kind", "maker"), CASES)
def test_an_unreadable_input_is_one_line_and_exit_2(tmp_path, command, kind, maker):
    target = maker(tmp_path, kind)
    words = [w.replace("CERTS", str(tmp_path / "out")) for w in command.split()]
    args = [str(target) if w == "{}" else w for w in words]
    env = {"KUBECONFIG": str(tmp_path / "no-kubeconfig"), "HOME": str(tmp_path)}
    if args[0] == "serve":  # a live cluster needs the scheduler chosen first (docs/install.md)
        env["GPUSHARE_NAMES__SCHEDULER_NAME"] = "none"
    if args[0] == "kubectl-inspect-gpushare":
        program = str(Path(gpushare_executable()).parent / args[0])
        done = subprocess.run([program, *args[1:]], capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env})
    else:
        done = run_gpushare(*args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    assert (done.returncode, len(done.stderr.splitlines())) == (2, 1), (done.returncode, done.stderr)
    assert done.stderr.startswith("gpushare: error: "), done.stderr
    assert target.name in done.stderr, done.stderr  # the line names the input
