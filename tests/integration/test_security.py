"""Process names tied to who runs them (issue 9, item 8), against a real daemon: SO_PEERCRED
decides who may attach under a configured name; administration needs no name at all."""
from __future__ import annotations

import grp
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import mccs
from mccs.client import Refused
from mccs.testbed.hosts import DaemonProcess, wait_until, write_config

pytestmark = pytest.mark.timeout(120)
MCCS = [sys.executable, "-m", "mccs.cli"]


def _with_processes(config: Path, *processes: dict) -> Path:
    """Append `[[process]]` tables to a host config written by write_config."""
    text = config.read_text()
    for proc in processes:
        text += "\n[[process]]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in proc.items())
    config.write_text(text)
    return config


@pytest.fixture
def daemon():
    made = []

    def start(config: Path) -> DaemonProcess:
        made.append(DaemonProcess(config).start())
        return made[-1]
    yield start
    for d in made:
        d.stop()


def test_strict_names_admit_only_configured_names_and_status_needs_none(tmp_path, daemon):
    config = _with_processes(write_config(tmp_path, "AA", strict_names=True),
                             {"name": "LEDG", "uid": os.getuid()}, {"name": "STAT"})
    d = daemon(config)
    with mccs.connect(config, "LEDG") as ledger:  # its owner attaches and sends
        ledger.send("AASTAT", b"to a process named STAT")
    with pytest.raises(Refused) as refused:
        mccs.connect(config, "ANY").send("AALEDG", b"x")
    assert refused.value.code == "not_permitted" and "strict_names" in str(refused.value)
    with mccs.connect(config, "STAT"):  # a process holding the name STAT ...
        status = subprocess.run(MCCS + ["status", "-c", str(config)], capture_output=True, text=True, timeout=30)
    assert status.returncode == 0, status.stderr  # ... does not get in the way of `mccs status`
    assert "AA" in status.stdout
    with mccs.connect(config, None) as admin:
        assert admin.status()["lists"]["recv"] == 1
    assert d.running


@pytest.fixture
def other_user():
    """A throwaway user and group, so a second uid can knock on the socket (root only)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("needs root and useradd to create a second user; run the suite as root to check SO_PEERCRED")
    name = "mccs" + secrets.token_hex(3)
    subprocess.run(["groupadd", name], check=True, capture_output=True)
    subprocess.run(["useradd", "-M", "-N", "-g", name, "-s", "/usr/sbin/nologin", name], check=True,
                   capture_output=True)
    try:
        yield pwd.getpwnam(name), grp.getgrnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", name], capture_output=True)


def _attach_as(user: pwd.struct_passwd, socket_path: str, name: str) -> str:
    """Fork, drop to `user`, try to SEND under `name`; the child's outcome as text."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery from here, only os._exit
        outcome = "error"
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            with mccs.connect(socket_path, name, connect_timeout=10) as c:
                c.send(f"AA{name}", b"forged?")
            outcome = "sent"
        except Refused as e:
            outcome = f"refused {e.code}: {e}"
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which asserts on it
            outcome = f"error {type(e).__name__}: {e}"
        finally:
            os.write(write, outcome.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        outcome = f.read()
    os.waitpid(pid, 0)
    return outcome


def test_a_reserved_name_cannot_be_attached_by_another_user(other_user, daemon):
    user, group = other_user
    base = Path(tempfile.mkdtemp(prefix="mccs-sec-", dir="/tmp"))  # outside pytest's 0700 tmp dir
    try:
        os.chmod(base, 0o755)
        (base / "run").mkdir(mode=0o750)
        os.chown(base / "run", 0, group.gr_gid)
        config = _with_processes(write_config(base, "AA", socket_group=group.gr_name),
                                 {"name": "LEDG", "uid": 0}, {"name": "OPS", "gid": group.gr_gid})
        d = daemon(config)
        sock = str(d.cfg.socket)
        refused = _attach_as(user, sock, "LEDG")
        assert refused.startswith("refused not_permitted") and "reserved" in refused, refused
        assert _attach_as(user, sock, "OPS") == "sent"  # its group may use OPS
        assert _attach_as(user, sock, "FREE") == "sent"  # unconfigured names: today's behaviour
        with mccs.connect(config, "LEDG") as owner:  # root owns LEDG: it attaches, and nothing was forged
            owner.send("AAOPS", b"from the owner")
        with mccs.connect(config, None) as admin:
            assert admin.status()["lists"]["recv"] == 3
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- line authentication between real daemons (issue 9, item 9) -----------------------------------
def _secret(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def _traced(d: DaemonProcess, kind: str) -> bool:
    """Whether a running daemon has traced an event of `kind` (its text: a line may be half written)."""
    return any(f'"kind":"{kind}"'.encode() in p.read_bytes() for p in Path(d.cfg.trace_dir).glob("*.jsonl"))


def _traces(d: DaemonProcess) -> list[dict]:
    import json
    return [json.loads(line) for p in Path(d.cfg.trace_dir).glob("*.jsonl") for line in p.read_text().splitlines()]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("protocol", ["async", "bsc"])
def test_lines_with_secrets_carry_traffic_only_between_ends_that_share_them(tmp_path, protocol):
    from mccs.testbed.loopback import timers
    from mccs.testbed.vserial import Lines
    baud = 115200
    good = _secret(tmp_path / "good.key", "correct horse battery staple 42")
    other = _secret(tmp_path / "other.key", "another secret entirely, 123456")
    cases = {"same": (good, good), "different": (good, other), "one end without": (good, None)}
    for n, (case, (secret_a, secret_b)) in enumerate(cases.items()):
        root = tmp_path / f"case{n}"
        with Lines(str(root / "dev"), ["AA-BB"], baud=baud) as vl:
            keys = {"protocol": protocol, "baud": baud, **timers(baud)}

            def host(me, peer, role, secret):
                line = {"peer": peer, "port": vl.port(me, peer), "role": role, **keys}
                return DaemonProcess(write_config(root, me, [line | ({"secret_file": secret} if secret else {})]))
            a, b = host("AA", "BB", "primary", secret_a), host("BB", "AA", "secondary", secret_b)
            with a.start(), b.start():
                with mccs.connect(a.config, "SND") as snd, mccs.connect(b.config, "RCV") as rcv:
                    snd.send("BBRCV", b"signed")
                    if case != "same":  # the sign-on refused, traced; after that nothing can cross
                        wait_until(lambda: _traced(a, "signon_refused") or _traced(b, "signon_refused"), 30,
                                   f"{case}: no signon_refused traced")
                    got = rcv.recv(timeout=8 if case == "same" else 1)
                    status = snd.status()
                    line, waiting = status["lines"][0], status["lists"]["send"]
        refusals = [t for d in (a, b) for t in _traces(d) if t["type"] == "line" and t["kind"] == "signon_refused"]
        if case == "same":
            assert got is not None and got.data == b"signed" and line["state"] == "UP", case
            assert not refusals
        else:
            assert got is None and line["state"] != "UP" and waiting == 1, case  # nothing crossed; it waits
            assert refusals, f"{case}: no signon_refused traced"
