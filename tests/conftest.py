from __future__ import annotations

import pytest

from policies.engine import Engine
from policies.settings import Settings, load_settings
from webhook.state import load_demo_snapshot


@pytest.fixture(scope="session")
def settings() -> Settings:
    return load_settings()


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Engine:
    return Engine(settings)


@pytest.fixture
def demo_state(settings: Settings):
    return load_demo_snapshot(settings.names)
