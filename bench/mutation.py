"""Mutation testing of the domain core (``policies/``): which changes to the code do the tests notice?

Each module is mutated by cosmic-ray's operators (it sees decorated functions, so every
``@rule`` body is mutated too) and each mutant is run against that module's fast tests
(``FAST`` below, every module of ``policies/``): a mutant is *killed* when a test fails, errors or
times out, and *survives* when they all pass. Mutants judged unable to change behaviour are
listed, one line of reason each, in ``bench/equivalent_mutants.txt`` and set aside.

Prints the budget first (mutants x measured seconds per test run / jobs), one line per module,
``mutation score: N %`` (killed / (mutants - equivalent), over every module run) and, last, the
time the run took. Survivors are written with their diff to ``--survivors FILE``. Nothing is
asserted and this is not part of CI: a full run of every module takes hours on two cores.

    .venv/bin/python bench/mutation.py --list                     # each module's tests; modules without their own
    .venv/bin/python bench/mutation.py --budget                   # what a full run would cost, then stop
    .venv/bin/python bench/mutation.py --jobs 2                   # every module, every mutant, 2 at a time
    .venv/bin/python bench/mutation.py --sample 40                # 40 random mutants per module
    .venv/bin/python bench/mutation.py policies/model/quantity.py --survivors /tmp/s.txt
    .venv/bin/python bench/mutation.py policies/model/quantity.py --rerun /tmp/s.txt   # those survivors again

Speed: the project is copied to one temporary directory per job (the work tree is never
touched), the parent process imports the third-party libraries once, and each mutant runs
``pytest -x`` in a forked child that imports the (mutated) project afresh from its job's copy.
The mutants of a module are enumerated once per version of its source (cosmic-ray's walk costs
minutes over all of ``policies/``) and kept in ``--cache`` keyed by the source's hash.
``--sample K`` draws K mutants per module with a fixed seed (``--seed``), so two runs of the
same code draw the same mutants.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import hashlib
import importlib
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "bench" / "equivalent_mutants.txt"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpushare-mutation"

# Each module of policies/ and the example tests (no server, no subprocess, no property search
# where an example test exists) that pin it down, most telling first. A test is named by its
# file's stem (test_<stem>.py), found anywhere under tests/, so moving test files changes nothing
# here. A module whose stem has no test file of its own gets the tests that exercise it (those that
# import it, or its rules' ids): `--list` marks them.
_RULES = "rule_base pod_rules gs_rules exemptions node_messages node_rules placement_messages placement_rules"
_FAST = {
    # model
    "policies/model/settings.py": "settings exemption_grants",
    "policies/model/field_paths.py": "workload_sites workload_settings",
    "policies/model/quantity.py": "quantity gs_rules",
    "policies/model/resources.py": "pod_rules gs_rules workloads scoring_numbers",
    "policies/model/modes.py": "node_messages node_rules placement",
    "policies/model/selectors.py": "selectors scoring_numbers scoring",
    "policies/model/cluster.py": "state_views placement cards node_rules scheduler_counting",
    "policies/model/workloads.py": "workloads workload_sites workload_rules workload_settings",
    "policies/model/subject.py": "rule_base rule_families pod_rules gs_rules",
    "policies/model/exemptions.py": "exemptions exemption_grants",
    "policies/model/grants.py": "exemption_grants exemptions",
    "policies/model/isolation.py": "isolation_findings isolation_rules isolation_audit",
    "policies/model/env_expansion.py": "isolation_round_two isolation_rules",
    "policies/model/gpu_memory.py": "gs_rules scoring_numbers",
    "policies/model/near_miss.py": "pod_rules gs_rules backstop_equivalence",
    "policies/model/catalog.py": "catalog node_rules node_messages",
    "policies/model/compatibility.py": "node_rules node_messages",
    "policies/model/ecs.py": "node_rules node_messages settings",
    "policies/model/sources.py": "rule_tables user_words",
    "policies/model/warning_text.py": "warning_limit fair_evaluation",
    # quota
    "policies/quota/quota_objects.py": "quota_findings quota_rules quota_oracle live_quotas",
    "policies/quota/quota_usage.py": "quota_oracle quota_findings quota_rules",
    # rules
    "policies/rules/base.py": _RULES + " exemption_grants",
    "policies/rules/relevance.py": "rule_families",
    "policies/rules/judged.py": "update_judging",
    "policies/rules/cel.py": "",
    "policies/rules/mutations.py": "mutations",
    "policies/rules/rule_index.py": "rule_base",
    "policies/rules/pod_resources.py": "gs_rules pod_rules",
    "policies/rules/sharing_rules.py": "sharing_rules scheduler_counting pod_rules",
    "policies/rules/exemptions.py": "exemptions exemption_grants",
    "policies/rules/node_rules.py": "node_messages node_rules",
    "policies/rules/placement_rules.py": "placement_messages placement_rules rule_base",
    "policies/rules/capacity_rules.py": "capacity_rules placement_rules",
    "policies/rules/quota_rules.py": "quota_findings quota_rules",
    "policies/rules/isolation_rules.py": "isolation_findings isolation_rules isolation_round_two",
    "policies/rules/workload_rules.py": "workload_rules workloads",
    "policies/rules/cluster_invariants.py": "audit",
    # placement
    "policies/placement/cards.py":
        "cards placement scoring_numbers scoring placement_rules gs_rules scheduler_counting",
    "policies/placement/card_choice.py":
        "cards placement scoring_numbers scoring placement_rules gs_rules scheduler_counting",
    "policies/placement/placement.py": "placement placement_rules scoring_numbers scoring node_messages",
    "policies/placement/topology.py": "topology",
    "policies/placement/capacity.py": "capacity_rules capacity_index",
    "policies/placement/capacity_index.py": "capacity_index capacity_rules work_budget",
    "policies/placement/allocation.py": "allocation_metrics cards scheduler_oracle",
    "policies/placement/assume.py": "state_views placement_rules live_state",
    "policies/placement/leadership.py": "leader state_views",
    "policies/placement/node_groups.py": "capacity_index capacity_rules work_budget",
    "policies/placement/work_budget.py": "capacity_index capacity_rules",
    # scoring
    "policies/scoring/scoring.py": "scoring_numbers scoring selectors",
    "policies/scoring/explain.py": "quota_explain cli_score",
    "policies/scoring/workload_explain.py": "quota_explain",
    # admission
    "policies/admission/engine.py": "rule_base rule_families gs_rules pod_rules",
    "policies/admission/budget.py": "fair_evaluation manifest_bombs",
    "policies/admission/dryrun.py": "dry_run cli_score",
    # generate
    "policies/generate/match_conditions.py": "match_conditions update_conditions",
    "policies/generate/workload_conditions.py": "match_conditions workload_crd_coverage",
    "policies/generate/backstop.py": "backstop",
    "policies/generate/near_miss_regex.py": "near_miss_regex automata",
    "policies/generate/doc_tables.py": "doc_tables workload_schemas",
    # audit
    "policies/audit/audit.py": "audit_findings audit",
}
# Tests that start a process: they check the command line, not the module, and cost a second each
# (stem::name). Tests marked `processes` are left out the same way.
_DESELECT = ["node_rules::test_a_broken_catalog_override_is_refused_at_start"]
# Third-party libraries the parent imports once, so a child only imports the project.
_WARM = ["pytest", "_pytest.python", "_pytest.assertion.rewrite", "hypothesis", "hypothesis.strategies",
         "pydantic", "pydantic_settings", "yaml", "jsonpatch", "msgspec", "flask", "kubernetes.client",
         "cryptography.x509", "rich.console", "click", "prometheus_client", "pythonjsonlogger.json",
         "requests", "jsonschema"]
_COPY = ["policies", "webhook", "certs", "tests", "bench", "pyproject.toml"]


def policies_modules(root: Path = ROOT) -> list[str]:
    """Every module of policies/ that holds code (a package's __init__ only documents and imports)."""
    return sorted(str(p.relative_to(root)) for p in (root / "policies").rglob("*.py") if p.name != "__init__.py")


def test_file(stem: str, root: Path = ROOT) -> Path:
    """tests/**/test_<stem>.py, relative to ``root``: wherever the test file lives under tests/."""
    found = sorted((root / "tests").rglob(f"test_{stem}.py"))
    if len(found) != 1:
        raise SystemExit(f"test_{stem}.py: {'not found' if not found else 'found twice'} under tests/ "
                         f"({', '.join(map(str, found))})")
    return found[0].relative_to(root)


def named_tests(module: str, root: Path = ROOT) -> str | None:
    """The stems of the module's tests: its own test_<module>.py first, when there is one (a new
    module, rule family or test needs no entry: CONTRIBUTING.md, "Add a rule"), then its ``_FAST``
    entry."""
    stem = Path(module).stem
    stems = ([stem] if has_own_tests(module, root) else []) + [
        s for s in _FAST.get(module, "").split() if s != stem]
    return " ".join(stems) or None


def fast_tests(module: str, root: Path = ROOT) -> list[str]:
    return [str(test_file(stem, root)) for stem in (named_tests(module, root) or "").split()]


def has_own_tests(module: str, root: Path = ROOT) -> bool:
    return any((root / "tests").rglob(f"test_{Path(module).stem}.py"))


@dataclass(frozen=True)
class Mutant:
    module: str
    operator: str
    occurrence: int
    line: int
    col: int

    def key(self, original_lines: list[str]) -> str:
        """How the equivalents file names a mutant: stable while its line of code is unchanged."""
        text = original_lines[self.line - 1]
        indent = len(text) - len(text.lstrip())
        # The same line of code may appear more than once: the second is "@col #2", and so on.
        seen = sum(1 for line in original_lines[: self.line - 1] if line.strip() == text.strip())
        which = f" #{seen + 1}" if seen else ""
        return f"{self.module} :: {self.operator} :: {text.strip()} :: @{self.col - indent}{which}"

    def source(self, original: str) -> str | None:
        """The mutated module (made only for the mutants that run: parsing costs)."""
        from cosmic_ray import plugins
        from cosmic_ray.mutating import mutate_code

        return mutate_code(original, plugins.get_operator(self.operator)(), self.occurrence)


def variant_key(key: str, original: str, mutated: str) -> str:
    """``key => mutated line``: one of the mutants an operator makes at one place (a number's +1 or -1),
    for an equivalents entry that holds for that variant only."""
    added = [line[1:].strip() for line in diff(original, mutated).splitlines() if line.startswith("+")]
    return f"{key} => {added[0] if added else ''}"


def diff(original: str, mutated: str) -> str:
    lines = difflib.unified_diff(original.splitlines(), mutated.splitlines(), lineterm="", n=0)
    return "\n".join(line for line in lines if not line.startswith(("---", "+++")))


def _operators() -> list[str]:
    from cosmic_ray import plugins

    # parameterised operators need a configuration; the defaults are enough
    return [name for name in sorted(plugins.operator_names()) if not plugins.get_operator(name).arguments()]


def _walk(module: str, source: str) -> list[Mutant]:
    """cosmic-ray's walk: every position each operator mutates, in a stable order (one parse)."""
    from cosmic_ray import plugins
    from cosmic_ray.ast import ast_nodes, get_ast_from_path

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / Path(module).name
        path.write_text(source, encoding="utf-8")
        nodes = list(ast_nodes(get_ast_from_path(path)))
    found: list[Mutant] = []
    for name in _operators():
        operator = plugins.get_operator(name)()
        positions = [start for node in nodes for start, _end in operator.mutation_positions(node)]
        found.extend(Mutant(module, name, occurrence, line, col) for occurrence, (line, col) in enumerate(positions))
    return found


def mutants_of(module: str, source: str, cache: Path | None) -> list[Mutant]:
    """Every mutant of one module, from the cache when this very source (and cosmic-ray) was walked before."""
    digest = hashlib.sha256(f"{metadata.version('cosmic-ray')}\n{' '.join(_operators())}\n{source}".encode())
    entry = cache / f"{digest.hexdigest()}.json" if cache is not None else None
    if entry is not None and entry.exists():
        return [Mutant(module, *row) for row in json.loads(entry.read_text(encoding="utf-8"))]
    found = _walk(module, source)
    if entry is not None:
        entry.parent.mkdir(parents=True, exist_ok=True)
        rows = [[m.operator, m.occurrence, m.line, m.col] for m in found]
        partial = entry.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(rows), encoding="utf-8")
        partial.replace(entry)  # whole or absent: a run stopped half-way leaves no half entry
    return found


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the type annotations are, in a module that never evaluates them (PEP 563)."""
    tree = ast.parse(source)
    if not any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
               and any(alias.name == "annotations" for alias in node.names) for node in tree.body):
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign):
            annotation = node.annotation
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotation = node.returns
        else:
            continue
        if annotation is not None:
            found.append(((annotation.lineno, annotation.col_offset),
                          (annotation.end_lineno, annotation.end_col_offset)))
    return found


def read_equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:
    """``key  # reason`` lines: the mutants set aside, each with why it cannot change behaviour."""
    judged: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        key, _, reason = raw.rpartition("  # ")  # the last one: a line of code may carry a comment too
        if not reason.strip():
            raise SystemExit(f"{path.name}: an equivalent mutant without a reason: {raw}")
        judged[key.strip()] = reason.strip()
    return judged


def start_tests(copy: Path, tests: list[str]) -> int:
    """Fork a child that runs pytest -x on ``tests`` in ``copy`` (a fresh import of the project there)."""
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: never returns
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.chdir(copy)
        sys.path.insert(0, str(copy))
        import pytest

        deselect = []
        for entry in _DESELECT:
            stem, _, name = entry.partition("::")
            path = str(test_file(stem, copy))
            if path in tests:
                deselect += ["--deselect", f"{path}::{name}"]
        marker = ["-m", "not processes"] if _has_marker(copy, "processes") else []
        code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header",
                            *marker, *deselect, *tests])
        os._exit(int(code))
    finally:
        os._exit(70)


def _has_marker(root: Path, name: str) -> bool:
    """Whether pyproject.toml declares the pytest marker (``-m`` refuses an unknown one under --strict-markers)."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    markers = config.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("markers", [])
    return any(marker.split(":")[0].strip() == name for marker in markers)


@dataclass
class Task:
    module: str
    tests: list[str]
    mutant: Mutant | None  # None: the unmutated module, to measure its tests' time
    mutated: str = ""
    variant: str = ""  # the key with the mutated line: names one of the variants an operator makes there


@dataclass
class Slot:
    """One job: a copy of the project, and the child running in it."""

    copy: Path
    task: Task | None = None
    pid: int = 0
    fd: int = -1
    started: float = 0.0
    deadline: float = 0.0


@dataclass
class Pool:
    """Up to ``len(slots)`` children at once, each in its own copy; a mutant is written into that copy
    before its child starts and put back when it ends."""

    slots: list[Slot]
    originals: dict[str, str] = field(default_factory=dict)

    def run(self, tasks: Iterator[Task], timeout_of: dict[str, float]) -> Iterator[tuple[Task, str, float]]:
        pending = iter(tasks)
        busy: list[Slot] = []
        idle = list(self.slots)
        exhausted = False
        while True:
            while idle and not exhausted:
                task = next(pending, None)
                if task is None:
                    exhausted = True
                    break
                slot = idle.pop()
                if task.mutant is not None:
                    (slot.copy / task.module).write_text(task.mutated, encoding="utf-8")
                slot.task, slot.started = task, time.monotonic()
                slot.deadline = slot.started + timeout_of.get(task.module, 600.0)
                slot.pid = start_tests(slot.copy, task.tests)
                slot.fd = os.pidfd_open(slot.pid)
                busy.append(slot)
            if not busy:
                return
            wait = max(0.0, min(s.deadline for s in busy) - time.monotonic())
            ready, _, _ = select.select([s.fd for s in busy], [], [], wait)
            now = time.monotonic()
            for slot in list(busy):
                if slot.fd in ready:
                    _, status = os.waitpid(slot.pid, 0)
                    code = os.waitstatus_to_exitcode(status)
                    result = "survived" if code == 0 else "killed"
                    if code == 5:  # every test of the module starts a process: none runs here
                        result = "no tests"
                elif now >= slot.deadline:
                    os.kill(slot.pid, signal.SIGKILL)
                    os.waitpid(slot.pid, 0)
                    result = "timeout"
                else:
                    continue
                os.close(slot.fd)
                slot.fd, slot.pid = -1, 0  # reaped: never signalled again (its pid may be reused)
                task = slot.task
                assert task is not None
                if task.mutant is not None:
                    (slot.copy / task.module).write_text(self.originals[task.module], encoding="utf-8")
                busy.remove(slot)
                idle.append(slot)
                yield task, result, now - slot.started

    def stop(self) -> None:
        for slot in self.slots:
            if slot.pid > 0:  # a child of ours still running
                with contextlib.suppress(ProcessLookupError, ChildProcessError, OSError):
                    os.kill(slot.pid, signal.SIGKILL)
                    os.waitpid(slot.pid, 0)
                os.close(slot.fd)
                slot.fd, slot.pid = -1, 0


def prepare_copy() -> Path:
    """A copy of every file git tracks (tests read docs, deploy files and data), else of ``_COPY``."""
    copy = Path(tempfile.mkdtemp(prefix="gpushare-mutation-"))
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
        for name in filter(None, listed.decode().split("\0")):
            if (ROOT / name).is_file():
                (copy / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, copy / name)
        return copy
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc")
    for name in _COPY:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=ignore)
        else:
            shutil.copy2(source, copy / name)
    return copy


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def list_modules() -> int:
    missing = [m for m in policies_modules() if named_tests(m) is None]
    for module in policies_modules():
        if module in missing:
            continue
        own = "" if has_own_tests(module) else "   (no test file of its own)"
        print(f"{module}: {' '.join(fast_tests(module))}{own}")
    if missing:
        print(f"no tests named for: {', '.join(missing)}")
        return 1
    return 0


@dataclass
class Tally:
    everything: int
    chosen: int
    pending: int = 0  # mutants still to run or skip; the module is reported when none is left
    killed: int = 0
    survived: int = 0
    equivalent: int = 0
    seconds: float = 0.0
    reported: bool = False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: every module of policies/)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N", help="mutants run N at a time (default 1)")
    parser.add_argument("--sample", type=int, metavar="K", help="K random mutants per module")
    parser.add_argument("--seed", type=int, default=20, help="seed of --sample (default 20)")
    parser.add_argument("--survivors", type=Path, help="write each survivor's diff to this file")
    parser.add_argument("--rerun", type=Path, metavar="FILE",
                        help="run only the mutants a --survivors FILE of an earlier run lists (are they killed now?)")
    parser.add_argument("--all-equivalents", action="store_true",
                        help="also run the mutants listed as equivalent (to see whether tests now kill them)")
    parser.add_argument("--cache", type=Path, default=CACHE,
                        help=f"where the mutants of each module's source are kept (default {CACHE})")
    parser.add_argument("--no-cache", action="store_true", help="walk every module afresh, keep nothing")
    parser.add_argument("--list", action="store_true", help="print each module's tests and stop")
    parser.add_argument("--budget", action="store_true", help="measure and print the budget, then stop")
    parser.add_argument("--copies", action="store_true",
                        help="run every mutant the slow way, in a fresh import of a copy of the project")
    args = parser.parse_args(argv)
    if args.list:
        return list_modules()
    modules = args.modules or policies_modules()
    for module in modules:
        if named_tests(module) is None:
            parser.error(f"no fast tests are named for {module} (_FAST in {Path(__file__).name}), "
                         f"and it has no test_{Path(module).stem}.py of its own")
    if args.jobs < 1:
        parser.error("--jobs is at least 1")
    run_started = time.monotonic()
    cache = None if args.no_cache else args.cache
    judged = read_equivalents()
    rerun = None
    if args.rerun is not None:  # the survivors file: each mutant's key on a line of its own, then its diff
        rerun = {line.partition(" => ")[0] for line in args.rerun.read_text(encoding="utf-8").splitlines()
                 if " :: " in line}
    # A plain `kill` ends the run through the finally below, which removes the copies.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    sys.dont_write_bytecode = True  # a mutant of the same size in the same second must not reuse a .pyc
    for name in _WARM:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    survivors = args.survivors.open("w", encoding="utf-8") if args.survivors is not None else None
    pool = Pool([Slot(prepare_copy()) for _ in range(args.jobs)])
    matched: set[str] = set()
    tallies: dict[str, Tally] = {}
    try:
        tests = {module: fast_tests(module) for module in modules}
        chosen: dict[str, list[Mutant]] = {}
        lines: dict[str, list[str]] = {}
        for module in modules:
            original = (ROOT / module).read_text(encoding="utf-8")
            pool.originals[module] = original
            lines[module] = original.splitlines()
            annotations = annotation_spans(original)
            # Annotations are never evaluated under `from __future__ import annotations`: a mutant
            # there ("str | None" -> "str - None") cannot change behaviour, so none is made.
            everything = [m for m in mutants_of(module, original, cache)
                          if not any(start <= (m.line, m.col) < end for start, end in annotations)]
            picked = everything
            if rerun is not None:
                picked = [m for m in everything if m.key(lines[module]) in rerun]
            elif args.sample is not None and args.sample < len(everything):
                picked = sorted(random.Random(f"{args.seed}:{module}").sample(everything, args.sample),
                                key=lambda m: (m.operator, m.occurrence))
            chosen[module] = picked
            tallies[module] = Tally(len(everything), len(picked))
            for mutant in picked:
                if mutant.key(lines[module]) in judged:
                    matched.add(mutant.key(lines[module]))
        print(f"enumerated {sum(t.everything for t in tallies.values())} mutants of {len(modules)} modules "
              f"in {minutes(time.monotonic() - run_started)}", flush=True)

        def to_run(module: str) -> list[Mutant]:
            return [m for m in chosen[module] if args.all_equivalents or m.key(lines[module]) not in judged]

        for module in modules:
            tallies[module].pending = len(to_run(module))
            tallies[module].equivalent = len(chosen[module]) - len(to_run(module))

        def record(mutant: Mutant, result: str, seconds: float, mutated: str, reached: int | None = None) -> None:
            """One mutant's verdict into its module's tally (and the survivors file)."""
            module = mutant.module
            tally = tallies[module]
            tally.pending -= 1
            tally.seconds += seconds
            if result == "no change":  # an operator position that makes no change
                return
            key = mutant.key(lines[module])
            variant = variant_key(key, pool.originals[module], mutated)
            if key in judged or variant in judged:
                matched.add(variant if variant in judged else key)
                tally.equivalent += 1
                if result not in ("survived", "equivalent"):
                    print(f"  note: listed as equivalent but killed: {key}", file=sys.stderr)
            elif result == "survived":
                tally.survived += 1
                if survivors is not None:
                    note = "# reached by no test\n" if reached == 0 else ""
                    survivors.write(f"{variant}\n{note}{diff(pool.originals[module], mutated)}\n\n")
                    survivors.flush()
            else:
                tally.killed += 1
            if not tally.pending:
                report(module, tally, rerun is not None)

        # One pytest session first: each mutant in a child forked after collection, against the tests
        # that reach it. What it cannot place comes back "slow", for the copies below.
        left: dict[str, list[tuple[Mutant, str | None]]] = {m: [(x, None) for x in to_run(m)] for m in modules}
        if not args.copies:
            outcome = run_in_session({m: to_run(m) for m in modules}, tests, args.jobs, args.budget)
            left = {m: [] for m in modules}
            for mutant, row in outcome.items():
                if row["result"] == "slow" and "mutated" in row:
                    left[mutant.module].append((mutant, row["mutated"]))
                elif row["result"] == "slow":  # the child could not even tell its text
                    left[mutant.module].append((mutant, None))
                elif not args.budget:
                    record(mutant, row["result"], row["seconds"], row.get("mutated", ""), row.get("tests"))
        slow_modules = [m for m in modules if left[m]]
        # The unmutated tests: they must pass, and their time is the budget's unit.
        baseline: dict[str, float] = {}
        for task, result, seconds in pool.run((Task(m, tests[m], None) for m in slow_modules), {}):
            if result == "no tests":  # nothing can see its mutants: each survives
                print(f"{task.module}: no test of its own runs in-process (all start processes)", flush=True)
                for mutant, known in left.pop(task.module):
                    mutated = known if known is not None else mutant.source(pool.originals[task.module])
                    record(mutant, "no change" if mutated in (None, pool.originals[task.module]) else "survived",
                           0.0, mutated or "", 0)
                continue
            if result != "survived":
                raise SystemExit(f"{task.module}: the unmutated tests fail ({result}); fix them first")
            baseline[task.module] = seconds
        slow_modules = [m for m in slow_modules if m in baseline]
        # Generous: on a loaded machine a slow run must not pass for a mutant that loops.
        timeout_of = {m: max(60.0, 10 * baseline[m]) for m in slow_modules}

        if slow_modules:
            cost = sum(len(left[m]) * baseline[m] for m in slow_modules)
            print(f"budget: {sum(len(left[m]) for m in slow_modules)} mutants in copies x their module's test "
                  f"run ({min(baseline.values()):.1f}-{max(baseline.values()):.1f} s) / {args.jobs} job(s) "
                  f"= {minutes(cost / args.jobs)} at most (a killed mutant stops at its first failing test)",
                  flush=True)
        if args.budget:
            for module in slow_modules:
                print(f"  {module}: {len(left[module])} mutants in copies x {baseline[module]:.1f} s")
            return 0

        def tasks() -> Iterator[Task]:
            for module in slow_modules:
                for mutant, known in left[module]:
                    mutated = known if known is not None else mutant.source(pool.originals[module])
                    if mutated is None or mutated == pool.originals[module]:
                        record(mutant, "no change", 0.0, "")
                        continue
                    variant = variant_key(mutant.key(lines[module]), pool.originals[module], mutated)
                    if variant in judged and not args.all_equivalents:
                        record(mutant, "equivalent", 0.0, mutated)
                        continue
                    yield Task(module, tests[module], mutant, mutated, variant)

        for done, (task, result, seconds) in enumerate(pool.run(tasks(), timeout_of), 1):
            assert task.mutant is not None
            record(task.mutant, result, seconds, task.mutated)
            print(f"  {done} {task.module} {result:8} {task.mutant.operator} line {task.mutant.line} (copy)",
                  file=sys.stderr, flush=True)
        for module in modules:  # a module whose every mutant was set aside or made no change
            report(module, tallies[module], rerun is not None)
    finally:
        pool.stop()
        for slot in pool.slots:
            shutil.rmtree(slot.copy, ignore_errors=True)
        if survivors is not None:
            survivors.close()
    if args.sample is None and rerun is None:
        stale = [k for k in judged if k.split(" :: ")[0] in modules and k not in matched]
        for key in stale:
            print(f"  note: listed as equivalent but no such mutant now: {key}", file=sys.stderr)
    killed = sum(t.killed for t in tallies.values())
    scored = killed + sum(t.survived for t in tallies.values())
    if args.sample is not None:
        print(f"sampled: K={args.sample} mutants per module, seed {args.seed}")
    print(f"mutation score: {100 * killed / scored if scored else 100.0:.0f} %")
    print(f"run time: {minutes(time.monotonic() - run_started)} with {args.jobs} job(s) "
          f"({sum(t.killed + t.survived for t in tallies.values())} mutants run)")
    return 0


def run_in_session(chosen: dict[str, list[Mutant]], tests: dict[str, list[str]], jobs: int,
                   budget_only: bool) -> dict[Mutant, dict]:
    """Every chosen mutant through one pytest session (``mutation_session``), in a process forked
    before the project is imported here; returns each mutant's row (result, seconds, mutated text)."""
    import pytest
    from mutation_session import Job, LineRecorder, MutantSession

    order = [mutant for module in chosen for mutant in chosen[module]]
    jobs_list = [Job(i, m.module, m.operator, m.occurrence, m.line, m.col, tests[m.module])
                 for i, m in enumerate(order)]
    scratch = Path(tempfile.mkdtemp(prefix="gpushare-session-"))
    out = scratch / "results.jsonl"
    files = sorted({path for module in chosen for path in tests[module]})
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)  # its own process group, with every child it forks: stopped as one
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.chdir(ROOT)
            sys.path.insert(0, str(ROOT))
            recorder = LineRecorder({str(ROOT / module) for module in chosen})
            recorder.start()  # before the project is imported: which lines run at import
            plugin = MutantSession(ROOT, jobs_list, out, jobs, recorder, _mutate, budget_only)
            deselect = []
            for entry in _DESELECT:
                stem, _, name = entry.partition("::")
                if str(test_file(stem)) in files:
                    deselect += ["--deselect", f"{test_file(stem)}::{name}"]
            marker = ["-m", "not processes"] if _has_marker(ROOT, "processes") else []
            code = pytest.main(["-q", "-s", "-p", "no:cacheprovider", "-p", "no:randomly", "--no-header",
                                "-W", "ignore::pytest.PytestAssertRewriteWarning",
                                *marker, *deselect, *files], plugins=[plugin])
            if plugin.failed is not None:
                print(f"the session stopped: {plugin.failed}", file=sys.stderr)
                os._exit(2)
            # 5: no test collected (every test of these modules starts a process); the mutants
            # were still made and reported, each reached by no test.
            os._exit(0 if code in (0, 5) else 2)
        finally:
            os._exit(70)
    try:
        _, status = os.waitpid(pid, 0)
    except BaseException:  # stopped (a kill, Ctrl-C): the session and its children stop too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    try:
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit("the session failed (above); `--copies` runs every mutant the slow way")
        rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] if out.exists() else []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {order[row["index"]]: row for row in rows}


def _mutate(source: str, job: object) -> str | None:
    """The mutated source, made in the session's child for ``job``."""
    mutant = Mutant(job.module, job.operator, job.occurrence, job.line, job.col)  # type: ignore[attr-defined]
    return mutant.source(source)


def report(module: str, tally: Tally, rerun: bool) -> None:
    if tally.reported:
        return
    tally.reported = True
    scored = tally.killed + tally.survived
    score = 100 * tally.killed / scored if scored else 100.0
    scope = f"all {tally.everything}" if tally.chosen == tally.everything else \
        f"{'rerun' if rerun else 'sample'} {tally.chosen} of {tally.everything}"
    print(f"{module}: {score:.1f} % killed ({tally.killed}/{scored}; {tally.survived} survived, "
          f"{tally.equivalent} equivalent set aside; {scope} mutants; {tally.seconds:.0f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
