"""A configuration file written for one test, and the refusal a broken one gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.settings import ConfigFileError, Settings, load_settings


def loaded(tmp_path: Path, text: str) -> Settings:
    """The settings a config.yaml holding ``text`` loads into."""
    config = tmp_path / "config.yaml"
    config.write_text(text)
    return load_settings(config)


def refusal(tmp_path: Path, text: str) -> str:
    """The words a config.yaml holding ``text`` is refused with (its path written as CONFIG)."""
    with pytest.raises(ConfigFileError) as raised:
        loaded(tmp_path, text)
    return str(raised.value).replace(str(tmp_path / "config.yaml"), "CONFIG")
