"""One pytest session for many mutants: collect the tests once, fork a child per mutant, run only the
tests that reach the mutated lines.

``bench/mutation.py``'s copies import the project and collect the tests afresh for every mutant,
seconds each. Here the tests are collected once. A child forked per mutant puts the mutated
function's code object into the live function object (``function.__code__``), so every reference to
it, in whatever module imported it, runs the mutant; it then runs only the tests that executed the
mutated lines in a traced, unmutated run. A mutant this cannot place is handed back to the copies
(``SLOW``): one outside a function body (module constants, class bodies, decorators, default values
are evaluated once, at import), one on a line that ran while the modules were imported (its result
may be kept), one whose function no live object holds. A mutant on lines no test executes survives
without a run: no test can see it.

The driver (``bench/mutation.py``) forks the process that runs :func:`run_session` before it
imports the project, since the copies import the project afresh; results come back as JSON lines.
"""

from __future__ import annotations

import ast
import functools
import gc
import importlib
import json
import os
import select
import signal
import sys
import threading
import time
import types
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# How a mutant's child ends.
SURVIVED, KILLED, SLOW, NO_CHANGE = 0, 1, 3, 4
_BASELINE_ERROR = 5
# A child's own cost beyond its tests (fork, making the mutant, fixtures): measured here, about 0.1 s.
_FORK_COST = 0.15
# A mutant whose tests run past this many times their traced time (itself several times their time
# untraced) is stopped and counted killed, as a timeout: its change made the tests loop or blow up.
_TIMEOUT_FACTOR = 3


@dataclass(frozen=True)
class Placement:
    """Where a mutant lives: the outermost function whose code object holds it (``None``: it runs at
    import, the copies must judge it) and the lines whose execution selects the tests."""

    qualname: str | None
    lines: frozenset[int]


def _contains(node: ast.AST, line: int, col: int) -> bool:
    start = (node.lineno, node.col_offset)  # type: ignore[attr-defined]
    end = (node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
    return start <= (line, col) < end


def place(tree: ast.Module, line: int, col: int) -> Placement:
    """The function body a mutant at (line, col) is in, found through module and class bodies only
    (a function nested in a function is patched through the outer one's code)."""
    scope: list[str] = []
    body: list[ast.stmt] = tree.body
    while True:
        node = next((n for n in body if _contains(n, line, col)), None)
        if isinstance(node, ast.ClassDef):
            scope.append(node.name)
            body = node.body
            continue
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return Placement(None, frozenset({line}))
        first = node.body[0]
        if (line, col) < (first.lineno, first.col_offset):  # decorators, defaults: evaluated at def time
            return Placement(None, frozenset({line}))
        return Placement(".".join([*scope, node.name]), frozenset(_statement_lines(node, line, col)))


def _statement_lines(function: ast.AST, line: int, col: int) -> Iterable[int]:
    """The innermost statement holding the mutant: all of a simple one; a compound one's header
    down to the mutant's line (not its body, whose statements would be innermost)."""
    innermost: ast.stmt | None = None
    for node in ast.walk(function):  # breadth first: a later match is a deeper one
        if isinstance(node, ast.stmt) and node is not function and _contains(node, line, col):
            innermost = node
    if innermost is None:
        return {line}
    last = line if hasattr(innermost, "body") else innermost.end_lineno or line
    return set(range(innermost.lineno, max(last, line) + 1))


class LineRecorder:
    """Which lines of the given files run (``sys.settrace``, in every thread started meanwhile)."""

    def __init__(self, files: set[str]) -> None:
        self.files = files
        self.hits: dict[str, set[int]] = defaultdict(set)

    def _call(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        filename = frame.f_code.co_filename
        if filename not in self.files:
            return None
        hits = self.hits[filename]
        hits.add(frame.f_lineno)

        def line(frame: types.FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                hits.add(frame.f_lineno)
            return line

        return line

    def start(self) -> None:
        self.hits = defaultdict(set)
        threading.settrace(self._call)
        sys.settrace(self._call)

    def stop(self) -> dict[str, set[int]]:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        return self.hits


@dataclass
class Job:
    """A mutant to run: what the driver knows of it, and the tests its module names."""

    index: int
    module: str
    operator: str
    occurrence: int
    line: int
    col: int
    tests: list[str]


@dataclass
class _Child:
    job: Job
    pid: int
    fd: int
    read: int
    deadline: float
    recheck: bool
    tests: int  # how many tests reach the mutant
    started: float = field(default_factory=time.monotonic)


class MutantSession:
    """A pytest plugin: after collection, it runs the mutants instead of the tests."""

    def __init__(self, root: Path, jobs: list[Job], out: Path, parallel: int,
                 recorder: LineRecorder, mutate: Any, budget_only: bool = False) -> None:
        self.root = root
        self.jobs = jobs
        self.out = out
        self.parallel = parallel
        self.recorder = recorder
        self.mutate = mutate  # (module source, Job) -> mutated source or None (cosmic-ray's)
        self.budget_only = budget_only
        self._project_folders = tuple(f"{root / name}{os.sep}" for name in ("policies", "webhook", "certs", "tests"))
        self.failed: str | None = None

    # -- the hook ------------------------------------------------------------------------------
    def pytest_runtestloop(self, session: Any) -> bool:
        # A module the project imports lazily (inside a function) must be live before the fork, or
        # each child would import it afresh from disk, unmutated.
        for module in sorted({job.module for job in self.jobs}):
            importlib.import_module(module.removesuffix(".py").replace("/", "."))
        at_import = self.recorder.stop()
        if session.testsfailed:
            self.failed = "the tests did not collect"
            return True
        items = list(session.items)
        functions, caches = self._live_objects()
        started = time.monotonic()
        coverage, seconds, broken = self._baseline(items, caches)
        print(f"collected {len(items)} tests; ran each once, traced, in {minutes(time.monotonic() - started)}",
              file=sys.stderr, flush=True)
        if broken:
            self.failed = "the unmutated tests fail: " + ", ".join(broken[:5])
            return True
        with self.out.open("w", encoding="utf-8") as out:
            self._run(items, coverage, seconds, at_import, functions, caches, out)
        return True

    # -- the unmutated, traced run --------------------------------------------------------------
    def _baseline(self, items: list[Any],
                  caches: list[Any]) -> tuple[dict[str, dict[str, set[int]]], dict[str, float], list[str]]:
        """Each test once, traced, in ``parallel`` children (by file)."""
        by_file: dict[str, list[Any]] = defaultdict(list)
        for item in items:
            by_file[str(item.path)].append(item)
        shares: list[list[Any]] = [[] for _ in range(self.parallel)]
        for group in sorted(by_file.values(), key=len, reverse=True):
            min(shares, key=len).extend(group)
        results: list[Path] = []
        pids = []
        for number, share in enumerate(shares):
            target = self.out.with_suffix(f".baseline{number}")
            results.append(target)
            pid = os.fork()
            if pid == 0:
                _quiet()
                try:
                    os._exit(self._traced(share, target, caches))
                finally:
                    os._exit(_BASELINE_ERROR)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
        coverage: dict[str, dict[str, set[int]]] = {}
        seconds: dict[str, float] = {}
        broken: list[str] = []
        for target in results:
            if not target.exists():
                broken.append(f"(a baseline child died: {target.name})")
                continue
            for row in map(json.loads, target.read_text(encoding="utf-8").splitlines()):
                coverage[row["id"]] = {f: set(lines) for f, lines in row["lines"].items()}
                seconds[row["id"]] = row["seconds"]
                if not row["passed"]:
                    broken.append(row["id"])
            target.unlink()
        return coverage, seconds, broken

    def _traced(self, items: list[Any], target: Path, caches: list[Any]) -> int:
        """Each test in a child of its own, as a mutant's child runs it: fixtures set up afresh and the
        project's caches empty, so a test that reads a cached or session-wide result is seen to
        execute the code that makes it (run after another test, it would not)."""
        from _pytest.runner import runtestprotocol

        with target.open("w", encoding="utf-8") as out:
            for position, item in enumerate(items):
                row_file = target.with_name(f"{target.name}.{position}")
                pid = os.fork()
                if pid == 0:
                    try:
                        for cache in caches:
                            cache.cache_clear()
                        started = time.monotonic()
                        self.recorder.start()
                        reports = runtestprotocol(item, log=False, nextitem=None)
                        hits = self.recorder.stop()
                        row = {"id": item.nodeid, "seconds": time.monotonic() - started,
                               "passed": not any(r.failed for r in reports),
                               "lines": {f: sorted(lines) for f, lines in hits.items()}}
                        row_file.write_text(json.dumps(row), encoding="utf-8")
                        os._exit(0)
                    finally:
                        os._exit(_BASELINE_ERROR)
                os.waitpid(pid, 0)
                if row_file.exists():
                    out.write(row_file.read_text(encoding="utf-8") + "\n")
                    row_file.unlink()
                else:  # the test took its process down: it cannot pass unmutated
                    out.write(json.dumps({"id": item.nodeid, "seconds": 0.0, "passed": False, "lines": {}}) + "\n")
        return 0

    # -- the live objects a mutant's code goes into --------------------------------------------
    def _live_objects(self) -> tuple[dict[tuple[str, str], list[types.FunctionType]], list[Any]]:
        files = self.recorder.files
        functions: dict[tuple[str, str], list[types.FunctionType]] = defaultdict(list)
        caches = []
        for obj in gc.get_objects():
            if isinstance(obj, types.FunctionType):
                code = obj.__code__
                if code.co_filename in files and "<locals>" not in code.co_qualname:
                    functions[(code.co_filename, code.co_qualname)].append(obj)
            elif isinstance(obj, functools._lru_cache_wrapper):  # the type functools.cache makes
                wrapped = getattr(obj, "__wrapped__", None)
                wrapped = getattr(wrapped, "__func__", wrapped)
                code = getattr(wrapped, "__code__", None)
                # The project's own caches only (a virtualenv may live inside the project's folder).
                if code is not None and code.co_filename.startswith(self._project_folders):
                    caches.append(obj)
        return functions, caches

    # -- the mutants ---------------------------------------------------------------------------
    def _run(self, items: list[Any], coverage: dict[str, dict[str, set[int]]], seconds: dict[str, float],
             at_import: dict[str, set[int]], functions: dict[tuple[str, str], list[types.FunctionType]],
             caches: list[Any], out: Any) -> None:
        by_path: dict[str, list[Any]] = defaultdict(list)
        for item in items:
            by_path[str(Path(item.path).relative_to(self.root))].append(item)
        sources = {job.module: (self.root / job.module).read_text(encoding="utf-8") for job in self.jobs}
        trees = {module: ast.parse(source) for module, source in sources.items()}
        plans = []
        for job in self.jobs:
            filename = str(self.root / job.module)
            placement = place(trees[job.module], job.line, job.col)
            targets = functions.get((filename, placement.qualname or ""), [])
            slow = placement.qualname is None or not targets
            chosen: list[Any] = []
            if not slow:
                candidates = [item for path in job.tests for item in by_path.get(path, [])]
                chosen = sorted((item for item in candidates
                                 if placement.lines & coverage.get(item.nodeid, {}).get(filename, set())),
                                key=lambda item: seconds.get(item.nodeid, 0.0))
            # Code that ran before the fork (imports, collection) may have left its result behind
            # (a constant, a test's parameters): a mutant of it that survives here is judged again
            # by the copies, where it runs from the start.
            recheck = bool(placement.lines & at_import.get(filename, set()))
            plans.append((job, filename, placement, chosen, slow, targets,
                          sum(seconds.get(item.nodeid, 0.0) for item in chosen), recheck))
        in_session = [plan for plan in plans if not plan[4]]
        cost = sum(plan[6] for plan in in_session) + _FORK_COST * len(in_session)
        print(f"budget: {len(in_session)} mutants in one session ({sum(1 for p in in_session if not p[3])} "
              f"reached by no test; {sum(1 for p in in_session if p[7])} judged again by the copies if they "
              f"survive), their tests' time {minutes(cost)} / {self.parallel} job(s) = "
              f"{minutes(cost / self.parallel)} at most; {len(plans) - len(in_session)} left to the copies",
              flush=True)
        by_module: dict[str, list[Any]] = defaultdict(list)
        for plan in in_session:
            by_module[plan[0].module].append(plan)
        for module, module_plans in sorted(by_module.items()):
            module_cost = sum(plan[6] for plan in module_plans) + _FORK_COST * len(module_plans)
            print(f"  {module}: {len(module_plans)} mutants, their tests' time {minutes(module_cost)}", flush=True)
        if self.budget_only:
            return
        pending = iter(plans)
        running: list[_Child] = []
        done = 0
        while True:
            while len(running) < self.parallel:
                plan = next(pending, None)
                if plan is None:
                    break
                job, filename, placement, chosen, slow, targets, budget, recheck = plan
                running.append(self._start(job, sources[job.module], filename, placement, chosen, slow,
                                           targets, caches, max(10.0, _TIMEOUT_FACTOR * budget), recheck))
            if not running:
                return
            wait = max(0.0, min(child.deadline for child in running) - time.monotonic())
            ready, _, _ = select.select([child.fd for child in running], [], [], wait)
            now = time.monotonic()
            for child in list(running):
                if child.fd in ready:
                    _, status = os.waitpid(child.pid, 0)
                    code = os.waitstatus_to_exitcode(status)
                    result = {SURVIVED: "survived", KILLED: "killed", SLOW: "slow",
                              NO_CHANGE: "no change"}.get(code, "slow")  # a crash: let the copies judge
                    if result == "survived" and child.recheck:
                        result = "slow"
                elif now >= child.deadline:
                    os.kill(child.pid, signal.SIGKILL)
                    os.waitpid(child.pid, 0)
                    result = "timeout"
                else:
                    continue
                os.close(child.fd)
                told = _read_all(child.read)
                os.close(child.read)
                running.remove(child)
                done += 1
                row = {"index": child.job.index, "result": result, "seconds": now - child.started,
                       "tests": child.tests, **told}
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"  {done} {child.job.module} {result:8} {child.job.operator} line {child.job.line}",
                      file=sys.stderr, flush=True)

    def _start(self, job: Job, source: str, filename: str, placement: Placement, chosen: list[Any],
               slow: bool, targets: list[types.FunctionType], caches: list[Any], timeout: float,
               recheck: bool) -> _Child:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _quiet()
            try:
                os._exit(self._mutant(job, source, filename, placement, chosen, slow, targets, caches, write))
            finally:
                os._exit(SLOW)
        os.close(write)
        return _Child(job, pid, os.pidfd_open(pid), read, time.monotonic() + timeout, recheck, len(chosen))

    def _mutant(self, job: Job, source: str, filename: str, placement: Placement, chosen: list[Any],
                slow: bool, targets: list[types.FunctionType], caches: list[Any], write: int) -> int:
        """The child: make the mutant, tell the parent its text, put it in place and run the tests."""
        from _pytest.runner import runtestprotocol

        mutated = self.mutate(source, job)
        if mutated is None or mutated == source:
            return NO_CHANGE
        os.write(write, json.dumps({"mutated": mutated}).encode())
        os.close(write)
        if slow:
            return SLOW
        code = _find_code(compile(mutated, filename, "exec"), placement.qualname or "")
        if code is None:
            return SLOW
        try:
            for function in targets:
                function.__code__ = code
        except ValueError:  # a different closure: only a fresh import can make this one
            return SLOW
        for cache in caches:
            cache.cache_clear()
        for position, item in enumerate(chosen):
            following = chosen[position + 1] if position + 1 < len(chosen) else None
            if any(report.failed for report in runtestprotocol(item, log=False, nextitem=following)):
                return KILLED
        return SURVIVED


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _find_code(module_code: types.CodeType, qualname: str) -> types.CodeType | None:
    """The code object of the function named ``qualname`` among the module's constants (a method's
    code sits in its class body's code)."""
    stack = [module_code]
    while stack:
        code = stack.pop()
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                if const.co_qualname == qualname:
                    return const
                if qualname.startswith(const.co_qualname + "."):  # a class body on the way
                    stack.append(const)
    return None


def _read_all(fd: int) -> dict[str, Any]:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    if not chunks:
        return {}
    try:
        told: dict[str, Any] = json.loads(b"".join(chunks))
    except ValueError:
        return {}
    return told


def _quiet() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
