"""The review endpoints answer in front of Flask (webhook.routes.admission): what Flask's error
handlers did for them, they do themselves."""

from __future__ import annotations

import json
import logging

from policies.admission.engine import Engine
from tests.support.helpers import admission_review, load_json
from webhook.routes.app import create_app
from webhook.routes.services import Services
from webhook.state.snapshot import load_demo_snapshot


def test_an_error_of_ours_in_a_review_is_a_json_500_and_one_log_line_and_the_next_review_is_answered(
        settings, caplog):
    engine = Engine(settings)
    app = create_app(Services(settings, engine, load_demo_snapshot(settings.names)))
    client = app.test_client()
    body = json.dumps(admission_review(load_json("pod-realistic.json")))

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug of ours")

    original, engine.validate = engine.validate, broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="gpushare.admission"):
        reply = client.post("/validate", data=body, content_type="application/json")
    assert reply.status_code == 500
    assert reply.get_json() == {"error": {"code": 500, "reason": "internal error: RuntimeError"}}
    assert "a bug of ours" not in reply.get_data(as_text=True)  # the reason names no internals
    (record,) = [r for r in caplog.records if r.name == "gpushare.admission"]
    assert record.getMessage() == "unhandled error on POST /validate" and record.exc_info is not None
    engine.validate = original  # type: ignore[method-assign]
    again = client.post("/validate", data=body, content_type="application/json")
    assert again.status_code == 200 and again.get_json()["response"]["allowed"] is True


def test_every_other_path_is_flasks(settings, engine):
    client = create_app(Services(settings, engine, load_demo_snapshot(settings.names))).test_client()
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.post("/validate-me", data=b"{}").status_code == 404
    assert client.get("/mutate").headers["Allow"] == "POST"
