"""No property test fails on wall time (tests/conftest.py): the suite's Hypothesis
profile has no deadline and no too_slow health check, so a loaded machine makes a
property test slower, never red."""

from hypothesis import HealthCheck, settings


def test_the_suites_profile_bounds_no_example_by_wall_time() -> None:
    assert settings.default is not None
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check
