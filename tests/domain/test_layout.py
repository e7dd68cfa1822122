"""The rooms of the code, as its imports draw them: no import circles, and every room imports
only the rooms below it. docs/internals.md, "Layout: where things go", is the map this test holds."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from policies.admission.engine import Engine
from webhook.http.routing import route_table
from webhook.routes.app import create_app
from webhook.routes.services import Services
from webhook.settings import Settings
from webhook.state.snapshot import load_demo_snapshot

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("policies", "certs", "webhook")

# The edge's rooms, from the bottom; a room imports only rooms on a level below its own (never one
# beside it or above). docs/internals.md's order line draws the same picture (test_the_doc_draws_it).
ORDER: tuple[tuple[str, ...], ...] = (
    ("documents",),
    ("services", "state", "report"),
    ("http",),
    ("routes",),
    ("server", "dashboard"),
    ("serving",),
    ("cli",),
)


def forbidden_by_order(order: tuple[tuple[str, ...], ...] = ORDER) -> dict[str, tuple[str, ...]]:
    """webhook.<room> -> the webhook rooms it must not import: those beside it and above it."""
    found: dict[str, tuple[str, ...]] = {}
    for level, rooms in enumerate(order):
        higher = [r for above in order[level:] for r in above]
        for room in rooms:
            found[f"webhook.{room}"] = tuple(f"webhook.{r}" for r in higher if r != room)
    return found


_BY_ORDER = forbidden_by_order()
# room -> modules it must never import (directly or lazily inside a function).
FORBIDDEN = {
    "policies": ("webhook", "certs", "flask", "gunicorn", "kubernetes", "werkzeug"),
    "certs": ("webhook", "policies"),
    "webhook.settings": ("webhook.documents", "webhook.state", "webhook.report", "webhook.routes", "webhook.server",
                         "webhook.cli", "webhook.serving", "webhook.dashboard", "webhook.http", "webhook.services",
                         "flask"),
    **_BY_ORDER,
    "webhook.documents": (*_BY_ORDER["webhook.documents"], "flask"),
    "webhook.services": (*_BY_ORDER["webhook.services"], "flask"),
    "webhook.state": (*_BY_ORDER["webhook.state"], "flask"),
    "webhook.report": (*_BY_ORDER["webhook.report"], "flask"),
    # The probe port's process: the standard library only, so it starts in tens of milliseconds.
    "webhook.probes": ("policies", "certs", "webhook.settings", "webhook.documents", "webhook.state",
                       "webhook.report", "webhook.routes", "webhook.server", "webhook.cli", "webhook.serving",
                       "webhook.dashboard", "webhook.http", "webhook.services", "flask", "gunicorn", "kubernetes",
                       "pydantic", "msgspec"),
}
# Every use of gunicorn goes through one module, whose contract test is tests/server/test_gunicorn_adapter.py.
GUNICORN_ADAPTER = "webhook.http.gunicorn_adapter"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code, relative imports resolved."""
    return _imports_under(path, ROOT)


def _imports_under(path: Path, root: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    package = _name_under(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return found


def project_modules() -> dict[str, set[str]]:
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    names = {module_name(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        graph[name] = {m for m in imports_of(path) if m in names and m != name}
    return graph


def test_the_edge_is_in_rooms() -> None:
    # serving.py composes the rooms; settings.py is the one settings object every room reads.
    top = ("__init__.py", "serving.py", "settings.py")
    flat = sorted(p.name for p in (ROOT / "webhook").glob("*.py") if p.name not in top)
    assert flat == [], f"modules in the flat webhook/ room: {flat}"


def wrong_imports(root: Path, room: str, forbidden: tuple[str, ...]) -> list[str]:
    """``module imports target`` for every import in ``room`` (under ``root``) of a forbidden module."""
    files = [p for p in root.rglob("*.py") if ".venv" not in p.parts
             and (_name_under(p, root) == room or _name_under(p, root).startswith(room + "."))]
    assert files, f"no module in {room}"
    return sorted(f"{_name_under(p, root)} imports {m}" for p in files for m in _imports_under(p, root)
                  if any(m == f or m.startswith(f + ".") for f in forbidden))


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_rooms_import_only_downwards(room: str) -> None:
    assert wrong_imports(ROOT, room, FORBIDDEN[room]) == []


def test_an_import_of_a_room_above_is_found(tmp_path: Path) -> None:
    for room in ("http", "routes", "server"):
        (tmp_path / "webhook" / room).mkdir(parents=True)
        (tmp_path / "webhook" / room / "__init__.py").write_text("")
    (tmp_path / "webhook" / "__init__.py").write_text("")
    (tmp_path / "webhook" / "routes" / "app.py").write_text("from webhook.http.guards import install\n")
    (tmp_path / "webhook" / "http" / "guards.py").write_text("def install():\n    from ..routes import app\n")
    (tmp_path / "webhook" / "server" / "worker.py").write_text("import webhook.routes.app\n")
    found = {room: wrong_imports(tmp_path, f"webhook.{room}", FORBIDDEN[f"webhook.{room}"])
             for room in ("http", "routes", "server")}
    assert found == {"http": ["webhook.http.guards imports webhook.routes",
                              "webhook.http.guards imports webhook.routes.app"],
                     "routes": [], "server": []}  # the server room is above routes: it may import them


def test_the_order_forbids_rooms_beside_and_above() -> None:
    assert FORBIDDEN["webhook.routes"] == ("webhook.server", "webhook.dashboard", "webhook.serving", "webhook.cli")
    assert "webhook.routes" not in FORBIDDEN["webhook.server"] and "webhook.dashboard" in FORBIDDEN["webhook.server"]
    assert "webhook.http" in FORBIDDEN["webhook.state"] and "webhook.state" in FORBIDDEN["webhook.services"]


def test_the_doc_draws_it() -> None:
    """docs/internals.md's order line is ORDER, with policies at the bottom."""
    text = " ".join((ROOT / "docs" / "internals.md").read_text().split())
    drawn = " ← ".join(", ".join(f"`{room}`" for room in level) for level in (("policies",), *ORDER))
    assert f"The order, from the bottom: {drawn}." in text


def test_only_the_adapter_imports_gunicorn() -> None:
    users = sorted(f"{module_name(p)} imports {m}" for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                   if module_name(p) != GUNICORN_ADAPTER
                   for m in imports_of(p) if m == "gunicorn" or m.startswith("gunicorn."))
    assert users == []


def test_no_import_circles() -> None:
    graph = project_modules()
    # Package __init__ modules that only re-export are edges of their children: drop the
    # parent -> child and child -> parent links that `from pkg import x` draws.
    def real(src: str, dst: str) -> bool:
        return not (src.startswith(dst + ".") or dst.startswith(src + "."))
    circles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if not real(node, nxt):
                continue
            if state.get(nxt) == 1:
                circles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert circles == []


@pytest.mark.processes
def test_every_module_imports_on_its_own() -> None:
    """Imported first, in a fresh interpreter, each module loads: no import order hides a cycle
    (a package whose __init__ imports a module that imports back, as policies.rules does)."""
    import subprocess
    import sys

    names = sorted(project_modules())
    script = (
        "import importlib, sys\n"
        "failed = []\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m.split('.')[0] in ('policies', 'webhook', 'certs')]:\n"
        "        del sys.modules[loaded]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        failed.append(f'{name}: {exc!r}')\n"
        "print('\\n'.join(failed))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr



# --- imports inside functions ------------------------------------------------------------------
# Python runs a module's top-level imports in order; a package runs its __init__ before any of its
# modules; a module already being loaded is handed back half-made, and `from it import name`
# fails if the name is not a submodule. The simulation below follows those rules over the
# project's own modules, so a loop shows as the import that would fail.

Statement = tuple[str, tuple[str, ...]]  # (module, names it takes from it; () for `import module`)


def _resolve(path: Path, root: Path, node: ast.ImportFrom) -> str:
    package = _name_under(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1] if node.level else []
    return ".".join([*base, *(node.module.split(".") if node.module else [])])


def _name_under(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _statement(path: Path, root: Path, node: ast.Import | ast.ImportFrom) -> list[Statement]:
    if isinstance(node, ast.Import):
        return [(alias.name, ()) for alias in node.names]
    return [(_resolve(path, root, node), tuple(alias.name for alias in node.names))]


def top_level_imports(path: Path, root: Path = ROOT) -> list[Statement]:
    """What loading ``path`` imports, in order: module-level statements (inside top-level ``if`` and
    ``try`` too), not in functions, not under ``if TYPE_CHECKING``."""
    found: list[Statement] = []

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.extend(_statement(path, root, node))
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody):
                    visit(block)

    visit(ast.parse(path.read_text(), str(path)).body)
    return found


def function_level_imports(path: Path, root: Path = ROOT) -> list[tuple[int, Statement]]:
    """(line, statement) of every import written inside a function."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[int, Statement]] = []
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found.extend((node.lineno, s) for s in _statement(path, root, node))
    return found


def first_failing_import(entry: str, imports: dict[str, list[Statement]]) -> str | None:
    """Load ``entry`` first in a fresh interpreter, as Python would: the first import that meets a
    half-made module it needs a name from, or None."""
    return _load_first(entry, imports)[0]


def _load_first(entry: str, imports: dict[str, list[Statement]]) -> tuple[str | None, set[str]]:
    """first_failing_import's answer, and the modules the load reached."""
    state: dict[str, str] = {}

    def load(module: str) -> str | None:
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            if name not in imports or name in state:
                continue
            state[name] = "loading"
            for target, names in imports[name]:
                failed = load(target)
                if failed:
                    return failed
                for taken in names:
                    if f"{target}.{taken}" in imports:
                        failed = load(f"{target}.{taken}")
                        if failed:
                            return failed
                    elif state.get(target) == "loading":
                        return f"{name} takes {taken} from {target}, which is still loading"
            state[name] = "done"
        return None

    return load(entry), set(state)


def imports_that_hide_a_loop(root: Path, packages: tuple[str, ...]) -> list[str]:
    """Every import inside a function that, written at the top of its module, would make some
    module fail to load first."""
    files = {_name_under(p, root): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    imports = {name: top_level_imports(path, root) for name, path in files.items()}
    # A load that never reaches the module an import is moved into reads nothing the move changed:
    # it ends as it did before (loaded, or failing as it did), so only the others are loaded again.
    before = {entry: _load_first(entry, imports) for entry in files}
    hidden = []
    for name, path in sorted(files.items()):
        for line, statement in function_level_imports(path, root):
            if statement[0] not in files:
                continue
            moved = {**imports, name: [*imports[name], statement]}
            failures = [f for entry in sorted(files)
                        if (f := first_failing_import(entry, moved) if name in before[entry][1] else before[entry][0])]
            if failures:
                hidden.append(f"{name}:{line} imports {statement[0]} inside a function; at the top: {failures[0]}")
    return hidden


def test_every_module_loads_first_in_the_simulation() -> None:
    files = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    imports = {name: top_level_imports(path) for name, path in files.items()}
    assert [f for entry in sorted(files) if (f := first_failing_import(entry, imports))] == []


def test_no_import_inside_a_function_hides_a_loop() -> None:
    """An import inside a function is for start-up speed (the CLI loads a command's modules when
    it runs), never to cut a loop: at the top of its module it would load just the same."""
    assert imports_that_hide_a_loop(ROOT, PACKAGES) == []


def test_an_import_that_hides_a_loop_is_named(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (package / "b.py").write_text("from pkg.a import f\n\ndef g():\n    return f\n")
    (package / "c.py").write_text("def h():\n    from pkg.b import g\n    return g\n")
    assert imports_that_hide_a_loop(tmp_path, ("pkg",)) == [
        "pkg.a:2 imports pkg.b inside a function; at the top: pkg.b takes f from pkg.a, which is still loading"]


# --- the server and http rooms -----------------------------------------------------------------
# webhook/server/ carries the transport, the workers and the scheduling, webhook/http/ the plumbing
# below the routes: each module one job, none over MAX_SERVER_LINES; what a request is comes from
# the route table the routes declare in (webhook.http.routing.RouteTable.declare), never from a
# path written in either room.

SERVER_ROOM = ROOT / "webhook" / "server"
HTTP_ROOM = ROOT / "webhook" / "http"
MAX_SERVER_LINES = 400


def test_no_module_in_the_server_room_is_over_400_lines() -> None:
    lines = {p.name: len(p.read_text().splitlines()) for room in (SERVER_ROOM, HTTP_ROOM)
             for p in sorted(room.glob("*.py"))}
    long = {name: count for name, count in lines.items() if count > MAX_SERVER_LINES}
    assert long == {}


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def route_paths_named(source: str, paths: frozenset[str]) -> list[str]:
    """String literals in ``source`` (docstrings aside: prose may cite a route) that name one of
    ``paths``, alone or inside a longer text ("/validate?timeout=5s", "GET /healthz")."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    pattern = re.compile("|".join(rf"(?<![\w/-]){re.escape(p)}(?![\w/-])" for p in sorted(paths)))
    return sorted({node.value for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
                   and pattern.search(node.value)})


def _declared_paths() -> frozenset[str]:
    settings = Settings()
    app = create_app(Services(settings, Engine(settings), load_demo_snapshot(settings.names)))  # the routes declare
    return route_table(app).paths()


def test_no_route_path_is_named_in_the_server_room() -> None:
    paths = _declared_paths()
    assert {"/validate", "/mutate", "/healthz", "/metrics", "/dry-run"} <= paths
    named = {p.name: found for room in (SERVER_ROOM, HTTP_ROOM) for p in sorted(room.glob("*.py"))
             if (found := route_paths_named(p.read_text(), paths))}
    assert named == {}


def test_a_route_path_in_code_is_found_and_one_in_prose_is_not() -> None:
    source = ('"""Serves /healthz."""\n'
              'def f(path):\n    """Not /metrics either."""\n'
              '    return path == "/healthz" or path.startswith("POST /validate?timeout=")\n'
              'OTHER = "/validated"\n')
    assert route_paths_named(source, frozenset({"/healthz", "/validate", "/metrics"})) == [
        "/healthz", "POST /validate?timeout="]


# --- the policies room ------------------------------------------------------------------------
# policies/ in packages by concept. POLICIES_MAY_IMPORT is the one table of what each package may
# import of the others (directly or lazily inside a function); every package's docstring says the
# same in a sentence that starts "May import" (or "Imports nothing else of ``policies``"), and the
# tests below hold the code and the docstrings to this table. Rules import placement (GB001-GB005
# and GC001 judge a placement); scoring imports quota (an explanation names the quota that refuses).

POLICIES_MAY_IMPORT: dict[str, frozenset[str]] = {
    "model": frozenset(),
    "quota": frozenset({"model"}),
    "placement": frozenset({"model"}),
    "rules": frozenset({"model", "quota", "placement"}),
    "scoring": frozenset({"model", "placement", "quota"}),
    "admission": frozenset({"model", "quota", "rules", "placement", "scoring"}),
    "generate": frozenset({"model", "quota", "rules"}),
    "audit": frozenset({"model", "quota", "rules", "placement", "scoring", "admission"}),
}
MAX_MODULE_LINES = 400


def _all_imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` at any depth (in functions, under TYPE_CHECKING),
    with ``from pkg import name`` also as ``pkg.name``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for module, names in _statement(path, root, node):
                found.append((node.lineno, module))
                found.extend((node.lineno, f"{module}.{name}") for name in names)
    return found


def policies_packages(root: Path) -> list[str]:
    return sorted(p.parent.name for p in (root / "policies").glob("*/__init__.py"))


def policies_violations(root: Path, allowed: dict[str, frozenset[str]]) -> list[str]:
    """Every import of one policies package by another that ``allowed`` does not list."""
    wrong: set[str] = set()
    for package in policies_packages(root):
        for path in sorted((root / "policies" / package).rglob("*.py")):
            for line, module in _all_imports(path, root):
                parts = module.split(".")
                if parts[0] == "policies" and len(parts) > 1 and parts[1] in allowed and parts[1] != package \
                        and parts[1] not in allowed.get(package, frozenset()):
                    wrong.add(f"{_name_under(path, root)}:{line} imports {'.'.join(parts[:2])}")
    return sorted(wrong)


def may_import_in_docstring(init: Path) -> frozenset[str] | None:
    """The packages the docstring's "May import ..." sentence names (empty for "Imports nothing else
    of ``policies``"); None when it has neither sentence."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    sentence = re.search(r"(May import|Imports nothing else of ``policies``)(.*?)\.(?:\s|$)", doc, re.S)
    if sentence is None:
        return None
    return frozenset(re.findall(r"``policies\.(\w+)``", sentence.group(2)))


def docstring_mismatches(root: Path, allowed: dict[str, frozenset[str]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for package in policies_packages(root):
        said = may_import_in_docstring(root / "policies" / package / "__init__.py")
        if said is None:
            found[package] = "no docstring sentence saying what it may import"
        elif said != allowed.get(package):
            found[package] = f"docstring names {sorted(said)}, the table {sorted(allowed.get(package, ()))}"
    return found


def long_modules(root: Path, packages: tuple[str, ...], limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    lines = {str(p.relative_to(root)): len(p.read_text().splitlines())
             for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}
    return {name: count for name, count in lines.items() if count > limit}


def test_the_policies_packages_are_the_table() -> None:
    assert policies_packages(ROOT) == sorted(POLICIES_MAY_IMPORT)
    flat = sorted(p.name for p in (ROOT / "policies").glob("*.py") if p.name != "__init__.py")
    assert flat == [], f"modules outside the packages of policies/: {flat}"


def test_the_table_has_no_loop() -> None:
    """Each package may import only packages that come before it in some order (audit last)."""
    order: list[str] = []
    remaining = dict(POLICIES_MAY_IMPORT)
    while remaining:
        ready = sorted(p for p, deps in remaining.items() if deps <= set(order))
        assert ready, f"the table loops among {sorted(remaining)}"
        order += ready
        for package in ready:
            del remaining[package]
    assert order[0] == "model" and order[-1] == "audit"


def test_policies_packages_import_only_what_the_table_allows() -> None:
    assert policies_violations(ROOT, POLICIES_MAY_IMPORT) == []


def test_every_policies_package_says_what_lives_there_and_what_it_may_import() -> None:
    assert docstring_mismatches(ROOT, POLICIES_MAY_IMPORT) == {}


def test_no_module_in_policies_or_webhook_is_over_400_lines() -> None:
    long = long_modules(ROOT, ("policies", "webhook"))
    assert long == {}


def _planted_tree(root: Path) -> None:
    """A small policies/ that keeps the table: model below, rules above it."""
    for package, doc in (("model", "Imports nothing else of ``policies``."),
                         ("rules", "May import ``policies.model``.")):
        (root / "policies" / package).mkdir(parents=True)
        (root / "policies" / package / "__init__.py").write_text(f'"""The {package}.\n\n{doc}\n"""\n')
    (root / "policies" / "__init__.py").write_text("")
    (root / "policies" / "model" / "quantity.py").write_text("def parse(text):\n    return int(text)\n")
    (root / "policies" / "rules" / "gs.py").write_text("from policies.model.quantity import parse\n\n"
                                                       "def check(text):\n    return parse(text) > 0\n")


PLANTED = {"model": frozenset(), "rules": frozenset({"model"})}


def test_a_planted_upward_import_is_named(tmp_path: Path) -> None:
    _planted_tree(tmp_path)
    assert policies_violations(tmp_path, PLANTED) == []
    assert docstring_mismatches(tmp_path, PLANTED) == {}
    # model reaching up into rules, lazily inside a function and relatively: both are found.
    (tmp_path / "policies" / "model" / "subject.py").write_text(
        "def judged(text):\n    from policies.rules.gs import check\n    return check(text)\n")
    (tmp_path / "policies" / "model" / "cluster.py").write_text("from ..rules import gs\n")
    assert policies_violations(tmp_path, PLANTED) == [
        "policies.model.cluster:1 imports policies.rules", "policies.model.subject:2 imports policies.rules"]


def test_a_docstring_that_does_not_say_the_table_is_named(tmp_path: Path) -> None:
    _planted_tree(tmp_path)
    (tmp_path / "policies" / "rules" / "__init__.py").write_text(
        '"""The rules.\n\nMay import ``policies.model`` and ``policies.placement``.\n"""\n')
    (tmp_path / "policies" / "model" / "__init__.py").write_text('"""The model: pure data."""\n')
    assert docstring_mismatches(tmp_path, PLANTED) == {
        "model": "no docstring sentence saying what it may import",
        "rules": "docstring names ['model', 'placement'], the table ['model']"}


def test_a_long_module_is_named(tmp_path: Path) -> None:
    _planted_tree(tmp_path)
    (tmp_path / "policies" / "rules" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "policies" / "rules" / "exact.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    assert long_modules(tmp_path, ("policies",)) == {"policies/rules/long.py": MAX_MODULE_LINES + 1}
