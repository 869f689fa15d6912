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

OLD_COMMIT = "5bef087"  # line drivers from before the BSC announcement and the sign-on's EPOCH=
BEFORE_EPOCH = "7f2b271"  # line drivers with the BSC announcement, from before EPOCH=


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


# -- the daemon's core in memory (tools.hostsim): test_kernel, test_queue ----------------------------
@pytest.fixture
def alone(tmp_path):
    """Host AA with a line to BB that never answers (BB is not simulated): what is sent waits on
    SEND_LIST."""
    from tools.hostsim import SimNet, line
    return SimNet(tmp_path, {"AA": [line("BB")]})


@pytest.fixture
def pair(tmp_path):
    """Hosts AA and BB joined by one in-memory line (modules with a pair of their own override it)."""
    from tools.hostsim import SimNet, line
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
