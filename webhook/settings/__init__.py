"""The one configuration object: every name, limit and switch the project uses.

``Settings`` composes the domain's sections (``policies.model.settings.PolicySettings``), the
certificates' (``certs.settings``) and the edge's own below: the server, overload limits, input
bounds, logging, metrics, authentication, ``gpushare check`` and the scheduler extender.

The package: ``sections`` (the edge's sections and ``Settings``) and ``loading`` (``load_settings``:
the file, the environment, errors in plain words). Import from the package itself: it is the public
name of the configuration (``Settings`` alone is read in some 55 places), so these re-exports are
its surface, not a shim to remove.

Sources, strongest first: environment (``GPUSHARE_`` prefix, ``__`` between nested keys),
then a YAML config file, then the defaults. The same file configures the webhook server and
``gpushare check`` so that CI and admission judge alike.

pydantic-settings reads the environment, and is imported only when a ``GPUSHARE_``
variable is set: it costs a third of ``gpushare check``'s start-up otherwise. For the same
reason every section builds its validator on first use (``defer_build``) and defaults are
``model_construct``-ed: without a config file or variables nothing is validated (the defaults
are valid by construction; tests/cli/test_first_hour.py holds them equal to validated ones).
"""

from certs.settings import CertRotationSettings, CertSettings
from policies.model.settings import RuleOverride
from webhook.settings.loading import ConfigFileError, load_settings
from webhook.settings.sections import (
    AuthSettings,
    CheckSettings,
    DryRunSettings,
    InputSettings,
    LeaderSettings,
    LogSettings,
    MetricsSettings,
    OverloadSettings,
    ScoringSettings,
    ServerSettings,
    Settings,
)

__all__ = [
    "AuthSettings",
    "CertRotationSettings",
    "CertSettings",
    "CheckSettings",
    "ConfigFileError",
    "DryRunSettings",
    "InputSettings",
    "LeaderSettings",
    "LogSettings",
    "MetricsSettings",
    "OverloadSettings",
    "RuleOverride",
    "ScoringSettings",
    "ServerSettings",
    "Settings",
    "load_settings",
]
