from __future__ import annotations

import pytest

from policies.admission.engine import Engine
from tests.support import (
    hermetic,
    process_guard,
    profiles,  # noqa: F401  (registers and loads the hypothesis profile)
)
from tests.support.processes import compile_bytecode
from webhook.settings import Settings, load_settings
from webhook.state.snapshot import load_demo_snapshot

hermetic.install()
process_guard.install()


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings()


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Engine:
    return Engine(settings)


@pytest.fixture
def demo_state(settings: Settings):
    return load_demo_snapshot(settings.names)


# The gunicorn workers (server.worker): the project's own, and stock gunicorn's gthread with the
# same scheduling as WSGI middleware. Tests marked `both_workers` (a module's pytestmark or one
# test) that use `worker_kind` (the shared `server` does) run against each; the rest against the
# project's worker. What only the project's transport does (slow clients, idle connections,
# hostile transport targets) is tested against it alone.
WORKER_KINDS = ("webhook", "gthread")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_workers: run against both gunicorn workers (server.worker)")
    if not hasattr(config, "workerinput"):  # once, in the process that starts any xdist workers
        # The tests start hundreds of Python processes (the CLI, servers, the workers themselves);
        # with PYTHONDONTWRITEBYTECODE set each would compile the project's modules again. (A
        # module that does not compile is printed here and fails its tests as before.)
        compile_bytecode()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses a fixture starting the server is marked `processes` without saying so
    (before `-m` selects); every other test that starts one is marked in its module or itself."""
    for item in items:
        if process_guard.FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(process_guard.MARKER)


def _started_unmarked(item: pytest.Item) -> None:
    found = process_guard.take()
    if found:
        pytest.fail(f"{item.nodeid} starts a process but is not marked `{process_guard.MARKER}` "
                    f"(mark the test or its module; docs/testing.md): {found[:3]}", pytrace=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item):
    # Before any fixture of the test (a module's server starts in the setup of its first test).
    process_guard.allowed = item.get_closest_marker(process_guard.MARKER) is not None
    process_guard.take()
    result = yield
    _started_unmarked(item)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item: pytest.Item):
    result = yield
    _started_unmarked(item)
    return result


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item):
    result = yield
    _started_unmarked(item)
    process_guard.allowed = True
    return result


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "worker_kind" in metafunc.fixturenames:
        kinds = WORKER_KINDS if metafunc.definition.get_closest_marker("both_workers") else WORKER_KINDS[:1]
        metafunc.parametrize("worker_kind", kinds, indirect=True, scope="module")


@pytest.fixture(scope="module")
def worker_kind(request: pytest.FixtureRequest) -> str:
    """The gunicorn worker the test's server runs (server.worker)."""
    return str(request.param)


@pytest.fixture(scope="module")
def server(tmp_path_factory, worker_kind):
    """The real `gpushare serve` on the demo snapshot, one per test module and worker kind."""
    from tests.support.helpers import gpushare_server

    with gpushare_server(tmp_path_factory.mktemp("serve"), worker=worker_kind) as running:
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
