"""The rooms of the code, as its imports draw them: no import circles, and every room imports
only the rooms below it. docs/internals.md, "Layout: where things go", is the map this test holds."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("policies", "certs", "webhook")

# room -> rooms it must never import (directly or lazily inside a function).
FORBIDDEN = {
    "policies": ("webhook", "certs", "flask", "gunicorn", "kubernetes", "werkzeug"),
    "certs": ("webhook", "policies"),
    "webhook.settings": ("webhook.documents", "webhook.state", "webhook.report", "webhook.routes", "webhook.server",
                         "webhook.cli", "webhook.serving", "webhook.dashboard", "flask"),
    "webhook.documents": ("webhook.state", "webhook.report", "webhook.routes", "webhook.server", "webhook.cli",
                          "webhook.serving", "flask"),
    "webhook.state": ("webhook.report", "webhook.routes", "webhook.server", "webhook.cli", "webhook.serving",
                      "flask"),
    "webhook.report": ("webhook.state", "webhook.routes", "webhook.server", "webhook.cli", "webhook.serving",
                       "flask"),
    "webhook.server": ("webhook.routes", "webhook.cli", "webhook.serving", "webhook.report"),
    "webhook.routes": ("webhook.cli", "webhook.serving", "webhook.dashboard"),
    # The dashboard is its own small app over routes' dry-run words; only the CLI starts it.
    "webhook.dashboard": ("webhook.cli", "webhook.serving", "webhook.server"),
    "webhook.serving": ("webhook.cli",),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of its code, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path).split(".")
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


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_rooms_import_only_downwards(room: str) -> None:
    files = [p for p in ROOT.rglob("*.py") if module_name(p) == room or module_name(p).startswith(room + ".")]
    assert files, f"no module in {room}"
    wrong = sorted(f"{module_name(p)} imports {m}" for p in files for m in imports_of(p)
                   if any(m == f or m.startswith(f + ".") for f in FORBIDDEN[room]))
    assert wrong == []


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
