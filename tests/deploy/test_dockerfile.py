"""The Dockerfile, read with Docker's own parser (no engine here to build it): the image the
Deployment expects."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import dockerfile
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|cc|build-essential|make|cmake|rustc|cargo|gfortran)\b")


def stages() -> list[list[dockerfile.Command]]:
    out: list[list[dockerfile.Command]] = []
    for command in dockerfile.parse_file(str(ROOT / "Dockerfile")):
        if command.cmd == "FROM":
            out.append([])
        assert out, "instructions before the first FROM"
        out[-1].append(command)
    return out


def deployment() -> dict:
    text = (ROOT / "deploy" / "kustomize" / "deployment.yaml").read_text()
    return next(d for d in yaml.safe_load_all(text) if d["kind"] == "Deployment")


def test_multi_stage_on_a_slim_python_base():
    all_stages = stages()
    assert len(all_stages) >= 2
    for stage in all_stages:
        image = stage[0].value[0]
        assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", image), image
    final = all_stages[-1]
    copies = [c for c in final if c.cmd == "COPY"]
    assert copies and all(any(f.startswith("--from=") for f in c.flags) for c in copies), \
        "the final stage takes only built artefacts from earlier stages"


def test_no_compiler_is_installed_in_the_final_image():
    final = stages()[-1]
    assert [c.original for c in final if c.cmd in ("RUN", "ADD")] == []
    for stage in stages():
        for command in stage:
            if command.cmd == "RUN":
                assert not COMPILERS.search(" ".join(command.value)), command.original


def test_runs_as_a_numeric_non_root_user_matching_the_deployment():
    users = [c for c in stages()[-1] if c.cmd == "USER"]
    assert users, "the final stage must set USER"
    uid, _, gid = users[-1].value[0].partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or gid.isdigit())
    pod = deployment()["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)


def test_entrypoint_is_gpushare_serve_on_the_deployment_port():
    final = stages()[-1]
    (entrypoint,) = [c for c in final if c.cmd == "ENTRYPOINT"]
    assert entrypoint.json and entrypoint.value == ("gpushare", "serve")
    (expose,) = [c for c in final if c.cmd == "EXPOSE"]
    container = deployment()["spec"]["template"]["spec"]["containers"][0]
    assert int(expose.value[0]) == container["ports"][0]["containerPort"]


def test_the_build_copies_every_package_the_distribution_installs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {c.value[0] for c in stages()[0] if c.cmd == "COPY"}
    assert packages <= copied
    assert project["project"]["scripts"]["gpushare"] == "webhook.cli:run"


def test_the_image_and_ci_install_the_pinned_runtime_dependencies():
    """constraints.txt pins each runtime dependency; the image and CI both install with it."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            pins[canonicalize_name(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["server"]]
    for requirement in map(Requirement, declared):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not pinned in constraints.txt"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} breaks {requirement}"
    runs = " ".join(" ".join(c.value) for stage in stages() for c in stage if c.cmd == "RUN")
    assert "--constraint constraints.txt '.[server]'" in runs
    copies = [c.value for c in stages()[0] if c.cmd == "COPY"]
    assert any("constraints.txt" in value for value in copies)
    assert "--constraint constraints.txt -e '.[server,test]'" in (ROOT / ".ci" / "run").read_text()
