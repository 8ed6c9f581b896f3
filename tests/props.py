"""Settings of the property-based tests (``tests/test_props_*.py``).

Example counts are modest by default so the suite stays quick on a loaded 2-core CI machine;
``HYPOTHESIS_PROFILE=long`` multiplies every count by 40 for a longer search.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings

LONG = os.environ.get("HYPOTHESIS_PROFILE", "") == "long"
SCALE = 40 if LONG else 1


def props(examples: int, **kw: Any) -> settings:
    """Settings for one property: ``examples`` by default (times 40 in the long profile)."""
    return settings(max_examples=examples * SCALE, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much, HealthCheck.data_too_large],
                    **kw)
