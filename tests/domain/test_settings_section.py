"""What every settings section shares (policies/model/settings_section.py): a key it does not know is
refused, and a section, once made, never changes, so what is kept per section (the watched resource
names, the workload table) stays true for it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from policies.model.resources import watched_resources
from policies.model.settings import Names, PolicySettings
from policies.model.workloads import workload_table
from webhook.settings import ConfigFileError, load_settings


def test_a_section_once_made_cannot_be_changed():
    settings = PolicySettings()
    watched = watched_resources(settings.names)
    table = workload_table(settings)
    with pytest.raises(ValidationError, match="frozen"):
        settings.names.resources.gpu_mem = "example.com/vmem"
    with pytest.raises(ValidationError, match="frozen"):
        settings.workloads.kinds = ()
    with pytest.raises(ValidationError, match="frozen"):
        settings.names = Names()
    assert watched_resources(settings.names) == watched
    assert workload_table(settings) is table


def test_a_key_a_section_does_not_know_is_refused(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("names:\n  resources: {gpu_memory: example.com/vmem}\n")
    with pytest.raises(ConfigFileError) as raised:
        load_settings(config)
    assert str(raised.value) == f"{config}: names.resources.gpu_memory: unknown setting (did you mean gpu_mem?)"
