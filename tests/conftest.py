from __future__ import annotations

import pytest

from policies.engine import Engine
from policies.settings import Settings, load_settings
from webhook.state.snapshot import load_demo_snapshot

from . import hermetic

hermetic.install()


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings()


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Engine:
    return Engine(settings)


@pytest.fixture
def demo_state(settings: Settings):
    return load_demo_snapshot(settings.names)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The real `gpushare serve` on the demo snapshot, one per test module."""
    from .helpers import gpushare_server

    with gpushare_server(tmp_path_factory.mktemp("serve")) as running:
        yield running


@pytest.fixture(scope="module")
def session(server):
    """A TLS session that trusts only the server's generated CA."""
    with server.session() as client:
        yield client



@pytest.fixture(autouse=True)
def _reads_only_the_repository():
    """Fail the test that opened (or passed to a command) a file beside the repository."""
    before = len(hermetic.violations)
    yield
    found = hermetic.violations[before:]
    del hermetic.violations[before:]
    assert not found, f"the test read outside the repository: {found}"
