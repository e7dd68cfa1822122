"""Mutation testing of the domain core (``policies/``): which changes to the code do the tests notice?

Each module is mutated by cosmic-ray's operators (it sees decorated functions, so every
``@rule`` body is mutated too) and each mutant is run against that module's fast tests
(``FAST_TESTS`` below): a mutant is *killed* when a test fails, errors or times out, and
*survives* when they all pass. Mutants judged unable to change behaviour are listed, one
line of reason each, in ``bench/equivalent_mutants.txt`` and set aside.

Prints one line per module and, last, ``mutation score: N %`` (killed / (mutants - equivalent),
over every module run). Survivors are written with their diff to ``--survivors FILE``.
Nothing is asserted and this is not part of CI: a full run takes tens of minutes.

    .venv/bin/python bench/mutation.py                       # every module, every mutant
    .venv/bin/python bench/mutation.py --sample 40           # 40 random mutants per module
    .venv/bin/python bench/mutation.py policies/model/quantity.py --survivors /tmp/s.txt
    .venv/bin/python bench/mutation.py policies/model/quantity.py --rerun /tmp/s.txt   # those survivors again

Speed: the project is copied to a temporary directory (the work tree is never touched), one
parent process imports the third-party libraries once, and each mutant runs ``pytest -x`` in a
forked child that imports the (mutated) project afresh. ``--sample K`` draws K mutants per
module with a fixed seed (``--seed``), so two runs of the same code draw the same mutants.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import importlib
import os
import random
import select
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "bench" / "equivalent_mutants.txt"

# Each module and the example-based tests (no server, no subprocess, no property search) that pin it
# down, most telling first: tests/test_<name>.py for each name.
_RULES = "rule_base pod_rules gs_rules exemptions node_messages node_rules placement_messages placement_rules"
_FAST = {
    "policies/rules/base.py": _RULES + " exemption_grants",
    "policies/rules/pod_resources.py": "gs_rules pod_rules",
    "policies/rules/sharing_rules.py": "scheduler_counting pod_rules",
    "policies/model/gpu_memory.py": "gs_rules scoring_numbers",
    "policies/rules/exemptions.py": "exemptions exemption_grants",
    "policies/rules/node_rules.py": "node_messages node_rules",
    "policies/rules/placement_rules.py": "placement_messages placement_rules rule_base",
    "policies/rules/capacity_rules.py": "capacity_rules placement_rules",
    "policies/placement/capacity.py": "capacity_rules",
    "policies/model/quantity.py": "quantity gs_rules",
    "policies/rules/mutations.py": "mutations",
    "policies/model/exemptions.py": "exemptions exemption_grants",
    "policies/model/grants.py": "exemption_grants exemptions",
    "policies/placement/cards.py":
        "cards placement scoring_numbers scoring placement_rules gs_rules scheduler_counting",
    "policies/placement/placement.py": "placement placement_rules scoring_numbers scoring node_messages",
    "policies/scoring/scoring.py": "scoring_numbers scoring selectors",
    "policies/model/selectors.py": "selectors scoring_numbers scoring",
    "policies/rules/isolation_rules.py": "isolation_findings",
    "policies/rules/workload_rules.py": "workload_rules",
    "policies/rules/quota_rules.py": "quota_findings",
}
# Tests that start a process: they check the command line, not the module, and cost a second each.
_DESELECT = ["tests/test_node_rules.py::test_a_broken_catalog_override_is_refused_at_start"]
FAST_TESTS: dict[str, list[str]] = {module: [f"tests/test_{name}.py" for name in names.split()]
                                    for module, names in _FAST.items()}
# Third-party libraries the parent imports once, so a child only imports the project.
_WARM = ["pytest", "_pytest.python", "_pytest.assertion.rewrite", "hypothesis", "hypothesis.strategies",
         "pydantic", "pydantic_settings", "yaml", "jsonpatch", "msgspec", "flask", "kubernetes.client",
         "cryptography.x509", "rich.console", "click", "prometheus_client", "pythonjsonlogger.json",
         "requests", "jsonschema"]
_COPY = ["policies", "webhook", "certs", "tests", "bench", "pyproject.toml"]


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


def diff(original: str, mutated: str) -> str:
    lines = difflib.unified_diff(original.splitlines(), mutated.splitlines(), lineterm="", n=0)
    return "\n".join(line for line in lines if not line.startswith(("---", "+++")))


def mutants_of(module: str, root: Path) -> list[Mutant]:
    """Every mutant cosmic-ray's operators make of one module, in a stable order."""
    from cosmic_ray import plugins
    from cosmic_ray.ast import ast_nodes, get_ast_from_path

    found: list[Mutant] = []
    for name in sorted(plugins.operator_names()):
        operator_class = plugins.get_operator(name)
        if operator_class.arguments():
            continue  # parameterised operators need a configuration; the defaults are enough
        operator = operator_class()
        positions = [start for node in ast_nodes(get_ast_from_path(root / module))
                     for start, _end in operator.mutation_positions(node)]
        found.extend(Mutant(module, name, occurrence, line, col) for occurrence, (line, col) in enumerate(positions))
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


def run_tests(tests: list[str], timeout: float) -> tuple[str, float]:
    """Run pytest in a forked child; ('killed' | 'survived' | 'timeout', seconds)."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # child: quiet, then a fresh import of the project under pytest
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        import pytest

        deselect = [arg for test in _DESELECT if test.split("::")[0] in tests for arg in ("--deselect", test)]
        code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "--no-header", *deselect, *tests])
        os._exit(int(code))
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - started
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    code = os.waitstatus_to_exitcode(status)
    if code == 5:
        raise SystemExit(f"no tests collected from {tests}")
    return ("survived" if code == 0 else "killed"), time.monotonic() - started


def prepare_copy() -> Path:
    copy = Path(tempfile.mkdtemp(prefix="gpushare-mutation-"))
    ignore = shutil.ignore_patterns("__pycache__", ".hypothesis", "*.pyc")
    for name in _COPY:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=ignore)
        else:
            shutil.copy2(source, copy / name)
    return copy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules to mutate (default: all of FAST_TESTS)")
    parser.add_argument("--sample", type=int, metavar="K", help="K random mutants per module")
    parser.add_argument("--seed", type=int, default=20, help="seed of --sample (default 20)")
    parser.add_argument("--survivors", type=Path, help="write each survivor's diff to this file")
    parser.add_argument("--rerun", type=Path, metavar="FILE",
                        help="run only the mutants a --survivors FILE of an earlier run lists (are they killed now?)")
    parser.add_argument("--all-equivalents", action="store_true",
                        help="also run the mutants listed as equivalent (to see whether tests now kill them)")
    args = parser.parse_args(argv)
    modules = args.modules or list(FAST_TESTS)
    for module in modules:
        if module not in FAST_TESTS:
            parser.error(f"no fast tests are known for {module}")
    judged = read_equivalents()
    rerun = None
    if args.rerun is not None:  # the survivors file: each mutant's key on a line of its own, then its diff
        rerun = {line for line in args.rerun.read_text(encoding="utf-8").splitlines() if " :: " in line}
    # A plain `kill` ends the run through the finally below, which removes the copy.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))

    copy = prepare_copy()
    os.chdir(copy)
    sys.path.insert(0, str(copy))
    sys.dont_write_bytecode = True  # a mutant of the same size in the same second must not reuse a .pyc
    for name in _WARM:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # Survivors are written as they are found, so a long run can be read while it goes on.
    survivors = args.survivors.open("w", encoding="utf-8") if args.survivors is not None else None
    matched: set[str] = set()
    total_killed = total_scored = 0
    try:
        for module in modules:
            tests = [t for t in FAST_TESTS[module] if (copy / t).exists()]
            path = copy / module
            original = path.read_text(encoding="utf-8")
            lines = original.splitlines()
            annotations = annotation_spans(original)
            outcome, seconds = run_tests(tests, timeout=600)
            if outcome != "survived":
                raise SystemExit(f"{module}: the unmutated tests fail ({outcome}); fix them first")
            # Generous: on a loaded machine a slow run must not pass for a mutant that loops.
            timeout = max(60.0, 10 * seconds)
            # Annotations are never evaluated under `from __future__ import annotations`: a mutant
            # there ("str | None" -> "str - None") cannot change behaviour, so none is made.
            everything = [m for m in mutants_of(module, copy)
                          if not any(start <= (m.line, m.col) < end for start, end in annotations)]
            chosen = everything
            if rerun is not None:
                chosen = [m for m in everything if m.key(lines) in rerun]
            elif args.sample is not None and args.sample < len(everything):
                chosen = sorted(random.Random(f"{args.seed}:{module}").sample(everything, args.sample),
                                key=lambda m: (m.operator, m.occurrence))
            killed = survived = equivalent = 0
            module_started = time.monotonic()
            for index, mutant in enumerate(chosen, 1):
                key = mutant.key(lines)
                if key in judged:
                    matched.add(key)
                    if not args.all_equivalents:
                        equivalent += 1
                        continue
                mutated = mutant.source(original)
                if mutated is None or mutated == original:
                    continue  # an operator position that makes no change
                path.write_text(mutated, encoding="utf-8")
                try:
                    result, _ = run_tests(tests, timeout)
                finally:
                    path.write_text(original, encoding="utf-8")
                if key in judged:
                    equivalent += 1
                    if result != "survived":
                        print(f"  note: listed as equivalent but killed: {key}", file=sys.stderr)
                    continue
                if result == "survived":
                    survived += 1
                    if survivors is not None:
                        survivors.write(f"{key}\n{diff(original, mutated)}\n\n")
                        survivors.flush()
                else:
                    killed += 1
                print(f"  {module} {index}/{len(chosen)} {result:8} {mutant.operator} line {mutant.line}",
                      file=sys.stderr, flush=True)
            scored = killed + survived
            total_killed += killed
            total_scored += scored
            score = 100 * killed / scored if scored else 100.0
            scope = f"all {len(everything)}" if chosen is everything else \
                f"{'rerun' if rerun is not None else 'sample'} {len(chosen)} of {len(everything)}"
            print(f"{module}: {score:.1f} % killed ({killed}/{scored}; {survived} survived, "
                  f"{equivalent} equivalent set aside; {scope} mutants; {time.monotonic() - module_started:.0f} s)",
                  flush=True)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
        if survivors is not None:
            survivors.close()
    if args.sample is None and rerun is None:
        stale = [k for k in judged if k.split(" :: ")[0] in modules and k not in matched]
        for key in stale:
            print(f"  note: listed as equivalent but no such mutant now: {key}", file=sys.stderr)
    overall = 100 * total_killed / total_scored if total_scored else 100.0
    if args.sample is not None:
        print(f"sampled: K={args.sample} mutants per module, seed {args.seed}")
    print(f"mutation score: {overall:.0f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
