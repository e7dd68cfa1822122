"""One guard chain, two pipelines: the Flask app's hooks and the plain-WSGI review endpoints in front
of it (webhook.routes.admission) run the same guards, in the same order (webhook.http.guards)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from policies.admission.engine import Engine
from tests.support.helpers import admission_review, load_json
from webhook.http.guards import (
    GUARD_ORDER,
    Authentication,
    BodyLimit,
    GuardChain,
    JsonErrors,
    ListenerSplit,
    RefusalMetrics,
)
from webhook.routes.app import create_app
from webhook.routes.services import Services
from webhook.settings import Settings
from webhook.state.snapshot import load_demo_snapshot

GUARD_CLASSES = (ListenerSplit, Authentication, BodyLimit, RefusalMetrics, JsonErrors)
TOKEN = "a-token-for-both-paths"


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every step any guard runs, as ``step:guard``, in the order run (whichever chain runs it)."""
    seen: list[str] = []
    for cls in GUARD_CLASSES:
        for step in ("before", "error", "refused"):
            original = getattr(cls, step)

            def recorded(self: Any, *args: Any, _original: Any = original, _step: str = step) -> Any:
                seen.append(f"{_step}:{self.name}")
                return _original(self, *args)

            monkeypatch.setattr(cls, step, recorded)
    yield seen


@pytest.fixture
def app(settings: Settings, tmp_path: Path, steps: list[str]) -> Flask:
    """Every guard active: an ops port (the listener split) and a bearer token on both paths."""
    token = tmp_path / "token"
    token.write_text(TOKEN)
    configured = settings.model_copy(update={
        "server": settings.server.model_copy(update={"ops_port": 8444, "max_body_bytes": 64 * 1024}),
        "auth": settings.auth.model_copy(update={"bearer_token_file": token,
                                                 "bearer_paths": ("/validate", "/dry-run")})})
    return create_app(Services(configured, Engine(configured), load_demo_snapshot(configured.names)))


def traces(app: Flask, steps: list[str], body: bytes, token: str = TOKEN) -> dict[str, tuple[str, list[str]]]:
    """For the review path and a Flask path, the answer's status and the guard steps it ran."""
    client = app.test_client()
    found = {}
    for path in ("/validate", "/dry-run"):
        steps.clear()
        reply = client.post(path, data=body, headers={"Authorization": f"Bearer {token}"},
                            content_type="application/json")
        found[path] = (str(reply.status_code), list(steps))
    return found


REVIEW = json.dumps(admission_review(load_json("pod-realistic.json"))).encode()
BEFORE = [f"before:{name}" for name in GUARD_ORDER]


def test_the_chain_is_the_order_the_docs_give(app: Flask) -> None:
    chain = app.extensions["gpushare.guards"]
    assert chain.names == GUARD_ORDER == ("listener split", "auth", "body limit", "metrics", "errors")
    assert app.wsgi_app.chain is chain  # type: ignore[attr-defined]


def test_both_pipelines_run_every_guard_in_order(app: Flask, steps: list[str]) -> None:
    found = traces(app, steps, REVIEW)
    assert found["/validate"][1] == found["/dry-run"][1] == BEFORE


def test_both_pipelines_stop_at_the_same_guard_and_count_the_refusal(app: Flask, steps: list[str]) -> None:
    refused = [f"refused:{name}" for name in GUARD_ORDER]
    found = traces(app, steps, REVIEW, token="wrong")
    assert found["/validate"] == found["/dry-run"] == ("401", [*BEFORE[:2], *refused])
    over = traces(app, steps, b"x" * (64 * 1024 + 1))
    assert over["/validate"] == over["/dry-run"] == ("413", [*BEFORE, "error:listener split", "error:auth",
                                                             "error:body limit", *refused])


@pytest.mark.parametrize("plant", ["reordered", "omitted"])
def test_a_review_path_with_another_chain_is_found(app: Flask, steps: list[str], plant: str) -> None:
    chain = app.extensions["gpushare.guards"]
    guards = chain.guards[::-1] if plant == "reordered" else tuple(g for g in chain.guards if g.name != "auth")
    app.wsgi_app.chain = GuardChain(guards)  # type: ignore[attr-defined]
    found = traces(app, steps, REVIEW)
    assert found["/dry-run"][1] == BEFORE
    assert found["/validate"][1] != found["/dry-run"][1]
