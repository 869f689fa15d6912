import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# These machines are shared and noisy: no per-example deadline.
settings.register_profile("mccs", deadline=None, max_examples=200)
settings.load_profile("mccs")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# The tests' Spark JVMs (the local sessions, `mccs analyze` in child processes) each run a few small
# jobs, where the JIT's optimising compiler (C2) costs more CPU than it saves: the client compiler
# alone (C1) takes a third off a session's start and first analysis, and the suite shares two
# cores. Set through Spark's own variable for the JVMs it launches, which prints nothing (unlike
# JAVA_TOOL_OPTIONS); set it empty to test with C2. (`./dev test` adds a class-data archive: dev.)
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")

OLD_COMMIT = "5bef087"  # line drivers from before the BSC announcement and the sign-on's EPOCH=
BEFORE_EPOCH = "7f2b271"  # line drivers with the BSC announcement, from before EPOCH=


# -- in parallel (pytest-xdist: `./dev test` runs `--dist loadgroup`, two workers a core) ----------
# The order the tests are handed out in. An xdist_group goes first, whole to one worker: the tests
# that take the `spark` fixture (they share its session, tests/spark/conftest.py). Then the other
# tests one by one in this order: the long ones first, so that none starts late and ends the run
# alone; then the rest of the Spark and integration tiers with the unit tier dealt in among them,
# evenly. An integration test mostly waits on line speeds and timers while a unit test computes:
# dealt together they keep both cores busy (the unit tier last left the cores a third idle in the
# middle of the run, and all four workers on them at the end). A name here that no longer matches
# only loses its place in the order.
LONG_FIRST = (
    "tests/integration/test_routing_network.py::test_a_ring_of_40",  # (65 s alone, 60 CPU-s)
    "tests/spark/test_analyze_report.py::test_report_of_",      # (a JVM of its own, besides the session's)
    "tests/integration/test_network.py::test_three_hosts_mesh",
    "tests/integration/test_demo.py",
    "tests/integration/test_loopback_notices.py::test_ring_of_five",
    "tests/integration/test_calls.py",
    "tests/integration/test_queue_daemons.py::test_queue_on_a_running",
    "tests/integration/test_e2e_daemons.py",
    "tests/integration/test_priority_daemons.py::test_an_urgent_message_goes_between",
    "tests/integration/test_custody_restore.py",
    "tests/integration/test_routing_network.py::test_receipts_cross",
    "tests/integration/test_reliability.py::test_msg_ids_still_queued",
    "tests/integration/test_bench_route.py",
    "tests/integration/test_signon_tamper.py",
    "tests/integration/test_epoch_daemons.py",
    "tests/integration/test_large_network.py",
    "tests/integration/test_line_over_pty.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    def rank(item):
        long = [i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)]
        return long[0] if long else len(LONG_FIRST)
    items.sort(key=rank)        # stable: a module's tests keep their order
    first = [item for item in items if rank(item) < len(LONG_FIRST)]
    tiers: dict[str, list] = {}
    for item in items[len(first):]:
        tiers.setdefault("unit" if item.path.parent.name == "unit" else "other", []).append(item)
    # each tier's tests at their share of the way through it, the tiers merged on that share
    dealt = sorted(((i / len(tier), name, item) for name, tier in tiers.items() for i, item in enumerate(tier)),
                   key=lambda t: t[:2])
    items[:] = first + [item for _, _, item in dealt]
    for item in items:      # a test that takes the Spark session is in a group, "spark" unless it names one
        if "spark" in getattr(item, "fixturenames", ()) and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("spark"))
    # pytest-xdist 3.8 tells its loadgroup scheduler a test's xdist_group by appending "@group" to
    # the test's node id (`item._nodeid`), which pytest 9.2's structured node ids ignore: the marks
    # would be silently dropped (pytest-xdist issue 1386). Where that happened, append it to the
    # structured id as xdist meant to (as its open pull request 1388 does).
    if not getattr(config.option, "loadgroup", False):      # (set on the workers of --dist loadgroup)
        return
    from _pytest.nodeid import NodeId
    for item in items:
        groups = sorted({m.args[0] if m.args else m.kwargs.get("name", "default")
                         for m in item.iter_markers("xdist_group")})
        if groups and "@" not in item.nodeid and isinstance(getattr(item, "_id", None), NodeId):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


@pytest.fixture(scope="session")
def linedrivers_at(tmp_path_factory):
    """`linedrivers_at(commit)`: the linedrivers package of that commit, imported from the git
    history as package `linedrivers_<commit>`; its events module (the same there) is today's, so
    the harness knows its events. Skips where the commit is not in the checkout."""
    root = Path(__file__).resolve().parents[1]
    top = tmp_path_factory.mktemp("old")
    sys.path.insert(0, str(top))

    def load(commit: str):
        dest = top / f"linedrivers_{commit}"
        if not dest.exists():
            dest.mkdir()
            try:
                names = subprocess.run(["git", "-C", str(root), "ls-tree", "--name-only", commit, "linedrivers/"],
                                       check=True, capture_output=True, text=True).stdout.split()
                for name in names:
                    (dest / Path(name).name).write_bytes(subprocess.run(
                        ["git", "-C", str(root), "show", f"{commit}:{name}"], check=True,
                        capture_output=True).stdout)
            except (OSError, subprocess.CalledProcessError):
                pytest.skip(f"commit {commit} is not in this checkout")
            (dest / "events.py").write_text("from linedrivers.events import *  # noqa: F403\n")
        return importlib.import_module(dest.name)
    yield load
    sys.path.remove(str(top))


@pytest.fixture(scope="session")
def old_linedrivers(linedrivers_at):
    """The line drivers of docs/DESIGN.md's version 1 (commit 5bef087)."""
    return linedrivers_at(OLD_COMMIT)


# -- the daemon's core in memory (mccs.testbed.hostsim): test_kernel, test_queue ----------------------------
@pytest.fixture
def alone(tmp_path):
    """Host AA with a line to BB that never answers (BB is not simulated): what is sent waits on
    SEND_LIST."""
    from mccs.testbed.hostsim import SimNet, line
    return SimNet(tmp_path, {"AA": [line("BB")]})


@pytest.fixture
def pair(tmp_path):
    """Hosts AA and BB joined by one in-memory line (modules with a pair of their own override it)."""
    from mccs.testbed.hostsim import SimNet, line
    return SimNet(tmp_path, {"AA": [line("BB")], "BB": [line("AA")]})


# -- two daemon processes over a vserial line: test_network, test_services_daemons ------------------
@pytest.fixture
def daemon_pair(tmp_path):
    """make(protocol="async", processes=(), **line_keys): hosts AA (primary) and BB (secondary) as
    daemon processes joined by one vserial line at 115200 baud, with the testbed's short timers;
    `processes`: AA's [[process]] tables. Returns (lines, AA, BB); all are stopped at the end."""
    from mccs.testbed.hosts import DaemonProcess, write_config
    from mccs.testbed.loopback import timers
    from mccs.testbed.vserial import Lines
    made = []

    def make(protocol="async", processes=(), **line_keys):
        vl = Lines(str(tmp_path / "dev"), ["AA-BB"], baud=115200).__enter__()
        keys = {"protocol": protocol, "baud": 115200, **timers(115200), **line_keys}
        a = DaemonProcess(write_config(tmp_path, "AA", [{"peer": "BB", "port": vl.port("AA", "BB"), "role": "primary",
                                                         **keys}], processes=processes))
        b = DaemonProcess(write_config(tmp_path, "BB", [{"peer": "AA", "port": vl.port("BB", "AA"),
                                                         "role": "secondary", **keys}]))
        made.append((vl, a.start(), b.start()))
        return made[-1]
    yield make
    for vl, a, b in made:
        a.stop()
        b.stop()
        vl.close()


@pytest.fixture
def tmpfs(tmp_path):
    """tmpfs(size): a folder on a file system of that size ("4m"; tmpfs, so root only: else the
    test is skipped), unmounted at the end. For the full-disk tests."""
    mounted = []

    def mount(size: str) -> Path:
        mnt = tmp_path / f"small-{len(mounted)}"
        mnt.mkdir()
        if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)],
                                               capture_output=True).returncode:
            pytest.skip("needs root and tmpfs to make a small file system (run the suite as root)")
        mounted.append(mnt)
        return mnt
    yield mount
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)])
