"""The route table: what each path the app serves is, built by ``create_app`` and handed to the
worker with the app (``route_table``). Nothing fills it as a side effect of an import: each app has
its own, so two apps in one process (tests, the bench's floor) never see each other's paths.

The worker's admission scheduling asks it what kind of work a request is (``work_of``); the
metrics ask it which endpoints have a label of their own (``endpoint_label``), so a scanner's
made-up paths are all counted as "other" and cannot grow the series.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum
from typing import Any

# Where create_app leaves the table on the Flask app (Flask's documented ``extensions`` dict).
EXTENSION = "gpushare.routes"


class Work(Enum):
    """The kind of work a request is (webhook.server.scheduling says what each kind waits for)."""

    REVIEW = "review"
    LARGE_REVIEW = "large review"  # not declared by routes: a review over overload.large_body_bytes
    TOOL = "tool"
    PROBE = "probe"
    SCRAPE = "scrape"


def label_of(path: str) -> str:
    """An endpoint's metrics label: ``/scheduler/filter`` -> ``scheduler-filter``."""
    return path.strip("/").replace("/", "-")


class RouteTable:
    """The paths one app serves: their kind of work and methods, and their metrics labels."""

    def __init__(self) -> None:
        self._declared: dict[str, tuple[Work, frozenset[str]]] = {}
        self._labels: set[str] = set()

    def declare(self, path: str, work: Work, methods: Iterable[str]) -> str:
        """Declare what kind of work ``path`` is for ``methods`` (other methods get a 405: probes);
        returns ``path``."""
        self._declared[path] = (work, frozenset(m.upper() for m in methods))
        return path

    def count(self, path: str) -> str:
        """Give ``path`` its own metrics label; returns the label."""
        label = label_of(path)
        self._labels.add(label)
        return label

    def paths(self) -> frozenset[str]:
        """Every path declared."""
        return frozenset(self._declared)

    def work_of(self, method: str, path: str) -> Work:
        """The class of a request; anything undeclared is answered at once by the app (404, 405)."""
        declared = self._declared.get(path)
        if declared is None or method not in declared[1]:
            return Work.PROBE
        return declared[0]

    def endpoint_label(self, path: str) -> str:
        """The metrics label of a request to ``path``: its own if counted, else "other"."""
        label = label_of(path)
        return label if label in self._labels else "other"


def route_table(app: Any) -> RouteTable:
    """The table ``app`` was built with (``create_app`` hands it over in ``app.extensions``); an
    empty one for an app built otherwise: every request a probe, every endpoint "other"."""
    table = getattr(app, "extensions", {}).get(EXTENSION)
    return table if isinstance(table, RouteTable) else RouteTable()
