import pytest


@pytest.fixture(scope="session")
def spark():
    """One local Spark session (`mccs analyze`'s own) for every test of the process that takes it:
    a JVM's start and its first analysis cost more CPU (about 30 s) than most of these tests. The
    tests that take it are in an xdist_group ("spark", or the one they name: tests/conftest.py),
    each group run by one worker under `./dev test` (`--dist loadgroup`): a session per group."""
    from mccs.analytics.spark import start_session
    s = start_session("local[2]")
    yield s
    s.stop()
