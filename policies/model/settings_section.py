"""The base of every settings section (policies/model/settings.py and the modules it gathers)."""

from pydantic import BaseModel, ConfigDict


class _Section(BaseModel):
    # Validators are built on first validation, and defaults are model_construct-ed: a command
    # run without a config file builds none (a third of `gpushare check`'s start-up otherwise).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
