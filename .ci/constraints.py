"""Write constraints.txt: the runtime dependencies of gpushare-webhook (the base install and the
``server`` extra), pinned at the versions installed in this environment (run it in the
virtualenv the tests passed in):

    .venv/bin/python .ci/constraints.py > constraints.txt

The Dockerfile and .ci/run install with ``-c constraints.txt``, so the image built next month
holds the versions CI tested today.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, distribution

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Extras that ship: the image installs [server]; test and bench are tools of this repository.
RUNTIME_EXTRAS = ("", "server")


def runtime_closure(project: str = "gpushare-webhook") -> dict[str, str]:
    pinned: dict[str, str] = {}
    top = [Requirement(r) for r in distribution(project).requires or []]
    # The runtime extras' requirements, their markers dropped (they are wanted here).
    stack = [Requirement(f"{r.name}{r.specifier}") for r in top
             if not r.marker or any(r.marker.evaluate({"extra": e}) for e in RUNTIME_EXTRAS)]
    while stack:
        requirement = stack.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue  # a dependency's own extras and other platforms
        name = canonicalize_name(requirement.name)
        if name in pinned:
            continue
        try:
            found = distribution(requirement.name)
        except PackageNotFoundError:
            continue
        pinned[name] = found.version
        stack.extend(Requirement(r) for r in found.requires or [])
    return pinned


if __name__ == "__main__":
    print("# Runtime dependencies as tested; regenerate with .ci/constraints.py (see its docstring).")
    for name, version in sorted(runtime_closure().items()):
        print(f"{name}=={version}")
