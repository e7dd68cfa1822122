"""Hypothesis profiles. ``ci`` (the default) runs each property test with its own small example
count; ``large`` (``HYPOTHESIS_PROFILE=large``) runs ten times as many for a deeper look on demand,
so stronger searches never slow the everyday suite. Loaded by conftest.py."""

from __future__ import annotations

import os

from hypothesis import settings

SCALE = {"ci": 1, "large": 10}
settings.register_profile("ci", deadline=None)
settings.register_profile("large", deadline=None, max_examples=1000)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in SCALE:
    raise ValueError(f"HYPOTHESIS_PROFILE={PROFILE!r}: use one of {', '.join(SCALE)}")
settings.load_profile(PROFILE)


def examples(count: int) -> int:
    """A property test's example count under the loaded profile (``count`` is its ci count)."""
    return count * SCALE[PROFILE]
