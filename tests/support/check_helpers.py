"""Running the installed ``gpushare check`` as CI does: a subprocess over real files."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.helpers import DATA, gpushare_executable

SEED_JOBS = DATA / "seeds"
SEED_OK = [SEED_JOBS / "000-cuda-sample.yaml", SEED_JOBS / "001-gpu-share-sample.yaml",
           SEED_JOBS / "004-tensorflow-mnist-share.yaml"]
SEED_33 = SEED_JOBS / "000-cuda-sample-33.yaml"


def run_gpushare(*args: str | Path, stdin: str | None = None, cwd: Path | None = None,
                 env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The installed console script, with GPUSHARE_* and colour variables cleared unless given."""
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith("GPUSHARE_") and k not in ("NO_COLOR", "FORCE_COLOR")}
    environment.update(env or {})
    return subprocess.run([gpushare_executable(), *map(str, args)], input=stdin, capture_output=True,
                          text=True, cwd=cwd, env=environment, timeout=timeout, check=False)


def check_json(*args: str | Path, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    done = run_gpushare("check", "--format", "json", *args, **kwargs)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def line_of(path: Path, needle: str) -> int:
    """The 1-based line of the only line of ``path`` containing ``needle``."""
    hits = [i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} occurs on lines {hits} of {path}"
    return hits[0]


def write_yaml(path: Path, *docs: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path
