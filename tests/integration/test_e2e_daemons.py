"""End-to-end protection between real daemons over pseudo-terminals (issue 34, docs/E2E.md): AA and
CC sign or seal, BB between them carries their messages without a key."""
from __future__ import annotations

import contextlib
import json
import random
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

import mccs
from mccs.core import e2e
from mccs.daemon import keys
from mccs.testbed.hosts import DaemonProcess, mccs_cli, wait_until, write_config
from mccs.testbed.loopback import timers
from mccs.testbed.vserial import Lines

BAUD = 115200
SECRET = b"launch code 7781"


def _cli(*args: str) -> str:
    run = mccs_cli(*args, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


class Chain:
    """AA - BB - CC; `keyed` hosts have keys and trust each other, with `host_keys` in [host]."""

    def __init__(self, tmp: Path, vl: Lines, keyed: tuple[str, ...], host_keys: dict, processes: dict,
                 baud: int = BAUD, every_host: dict | None = None):
        self.tmp, self.d = tmp, {}
        self.cfg: dict[str, Path] = {}
        line = {"protocol": "async", "baud": baud, **timers(baud)}
        # static routes at the ends: what AA sends CC waits at BB while CC is away (BB keeps its neighbour's)
        routes = {"AA": [{"to": "CC", "via": "BB"}], "CC": [{"to": "AA", "via": "BB"}]}
        for h, peers in (("AA", ["BB"]), ("BB", ["AA", "CC"]), ("CC", ["BB"])):
            self.cfg[h] = write_config(tmp, h, [{"peer": p, "port": vl.port(h, p), **line} for p in peers],
                                       routes.get(h, ()), processes.get(h, ()), **(every_host or {}),
                                       **(host_keys if h in keyed else {}))
        for h in keyed:
            _cli("keys", "init", "-c", str(self.cfg[h]))
        shown = {h: _cli("keys", "show", "-c", str(self.cfg[h])).split() for h in keyed}  # ["AA", KEY]
        for h in keyed:
            for other in keyed:
                if other != h:
                    _cli("keys", "trust", "-c", str(self.cfg[h]), *shown[other])
        self.d = {h: DaemonProcess(self.cfg[h]).start() for h in self.cfg}

    def counters(self, host: str) -> dict:
        with mccs.connect(self.d[host].config, None) as q:
            return q.status()["counters"]

    def routed(self) -> None:
        """Both lines up: a first message goes from AA to CC."""
        with mccs.connect(self.d["AA"].config, "WARM") as s:
            s.send("CCWARM", b"hello")
        assert [m.data for m in _recv(self.d["CC"].config, "WARM", 1)] == [b"hello"]

    def stop(self) -> None:
        for daemon in self.d.values():
            daemon.stop()


@contextlib.contextmanager
def _chain(tmp_path, keyed=("AA", "CC"), processes: dict | None = None, baud: int = BAUD,
           every_host: dict | None = None, **host_keys):
    with Lines(str(tmp_path / "dev"), ["AA-BB", "BB-CC"], baud=baud) as vl:
        chain = Chain(tmp_path, vl, keyed, {"e2e": "seal", **host_keys}, processes or {}, baud, every_host)
        try:
            chain.routed()
            yield chain
        finally:
            chain.stop()


def _recv(config, name: str, n: int, timeout: float = 60) -> list[mccs.Message]:
    got = []
    with mccs.connect(config, name) as r:
        for _ in range(n):
            m = r.recv(timeout=timeout)
            assert m is not None, f"only {len(got)} of {n} came"
            got.append(m)
    return got


def _files_hold(directory: Path, host: str, needle: bytes) -> list[str]:
    """The files of a host (checkpoint, its WAL, traces, log) that hold `needle`."""
    paths = [*directory.glob(f"{host}.db*"), *directory.glob(f"trace/{host}/*"), *directory.glob(f"{host}.toml.log")]
    return [p.name for p in paths if p.is_file() and needle in p.read_bytes()]


@pytest.mark.timeout(240)
def test_a_sealed_message_crosses_a_transit_host_that_stores_only_ciphertext_and_arrives_sealed(tmp_path):
    with _chain(tmp_path) as c:
        c.d["CC"].stop()  # the messages wait at BB, in its checkpoint
        with mccs.connect(c.d["AA"].config, "SEND") as s:
            for i in range(10):
                s.send("CCRECV", SECRET + b" #%d" % i)
        wait_until(lambda: _at_bb(tmp_path, "AASEND") == 10, 60, "BB to store the 10 messages")
        db = sqlite3.connect(f"file:{tmp_path / 'BB.db'}?mode=ro", uri=True)
        rows = db.execute("SELECT data, seal FROM send_list WHERE from_id = 'AASEND'").fetchall()
        db.close()
        assert len(rows) == 10 and all(len(seal) == 23 and SECRET not in data for data, seal in rows)
        assert _files_hold(tmp_path, "BB", SECRET) == []  # checkpoint, WAL, traces, log
        assert _files_hold(tmp_path, "AA", SECRET)  # (the origin's own checkpoint holds it: the search works)
        c.d["CC"].start()
        got = _recv(c.d["CC"].config, "RECV", 9)
        assert [m.data for m in got] == [SECRET + b" #%d" % i for i in range(9)]
        assert {m.e2e for m in got} == {"sealed"}
        last = json.loads(_cli("recv", "-c", str(c.cfg["CC"]), "--as", "RECV", "--json", "--timeout", "30"))
        assert (last["text"], last["e2e"]) == ((SECRET + b" #9").decode(), "sealed")
        assert c.counters("CC").get("refused", 0) == 0


@pytest.mark.timeout(300)
def test_what_a_transit_host_alters_or_forges_on_its_disk_is_refused_and_the_stream_goes_on_after_the_gap_wait(
        tmp_path):
    with _chain(tmp_path, e2e_gap_wait=5.0) as c:
        c.d["CC"].stop()
        with mccs.connect(c.d["AA"].config, "SEND") as s:
            ids = [s.send("CCRECV", b"order %d" % i) for i in range(5)]
        wait_until(lambda: _at_bb(tmp_path, "AASEND") == 5, 60, "BB to store the 5 messages")
        c.d["BB"].stop()
        db = sqlite3.connect(tmp_path / "BB.db")
        with db:
            (seq, data), = db.execute("SELECT seq, data FROM send_list WHERE msg_id = ?", (ids[2],)).fetchall()
            db.execute("UPDATE send_list SET data = ? WHERE seq = ?", (bytes([data[0] ^ 1]) + data[1:], seq))
            row = db.execute("SELECT * FROM send_list WHERE seq = ?", (seq,)).fetchone()
            columns = [d[0] for d in db.execute("SELECT * FROM send_list").description]
            forged = dict(zip(columns, row), seq=seq + 1000, from_id="AAEVIL", msg_id=999, pseq=0, epoch="",
                          data=b"order 9999", seal=b"")  # a message of BB's own under AA's name
            db.execute(f"INSERT INTO send_list ({', '.join(forged)}) VALUES ({', '.join('?' * len(forged))})",
                       tuple(forged.values()))
            db.execute("UPDATE send_list SET data = x'', seal = x'', flags = 8 WHERE msg_id = ?", (ids[4],))  # a void
        db.close()
        c.d["BB"].start()
        c.d["CC"].start()
        got = _recv(c.d["CC"].config, "RECV", 3, timeout=90)
        assert [m.data for m in got] == [b"order 0", b"order 1", b"order 3"]  # 3 after the wait; 4 was voided
        counters = c.counters("CC")
        assert counters.get("refused_bad_tag") == 1 and counters.get("refused_unsigned") == 1
        with mccs.connect(c.d["AA"].config, "SEND") as s:
            told = [json.loads(s.recv(from_id="CCMCCS", timeout=30).data) for _ in range(2)]
        assert [(b["notice"], b["msg_id"], b["reason"]) for b in told] == [
            ("undeliverable", ids[2], "refused"), ("undeliverable", ids[4], "voided")]
        with mccs.connect(c.d["CC"].config, "RECV") as r:
            assert r.recv(timeout=2) is None  # nothing altered or forged, ever


@pytest.mark.timeout(240)
def test_a_replay_from_a_restored_old_checkpoint_of_the_transit_host_is_not_delivered_twice(tmp_path):
    with _chain(tmp_path) as c:
        c.d["CC"].stop()
        with mccs.connect(c.d["AA"].config, "SEND") as s:
            for i in range(6):
                s.send("CCRECV", b"once %d" % i)
        wait_until(lambda: _at_bb(tmp_path, "AASEND") == 6, 60, "BB to store the 6 messages")
        _cli("checkpoint", "backup", "-c", str(c.cfg["BB"]), str(tmp_path / "BB.backup"))
        c.d["CC"].start()
        assert [m.data for m in _recv(c.d["CC"].config, "RECV", 6)] == [b"once %d" % i for i in range(6)]
        wait_until(lambda: not _at_bb(tmp_path, "AASEND"), 60, "BB to hand all on")
        c.d["BB"].kill()  # its disk lost; the old copy put back: it holds the six again
        for path in tmp_path.glob("BB.db*"):
            if path.name != "BB.db.lock":
                path.unlink()
        shutil.copy(tmp_path / "BB.backup", tmp_path / "BB.db")
        c.d["BB"].start()
        wait_until(lambda: not _at_bb(tmp_path, "AASEND"), 60, "the replayed copies to reach CC")
        with mccs.connect(c.d["CC"].config, "RECV") as r:
            assert r.recv(timeout=3) is None
            lines = r.status()["lines"]
        assert sum(line["counters"].get("duplicates", 0) for line in lines) >= 6  # they came, and were dropped


def _at_bb(tmp: Path, from_id: str) -> int:
    """Messages from `from_id` on BB's SEND_LIST, as its checkpoint says (read only, while it runs)."""
    conn = sqlite3.connect(f"file:{tmp / 'BB.db'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM send_list WHERE from_id = ?", (from_id,)).fetchone()[0]
    finally:
        conn.close()


@pytest.mark.timeout(240)
def test_an_untrusted_origin_a_rotated_key_and_accept_from(tmp_path):
    processes = {"CC": [{"name": "PAY", "accept_from": ["AAGOOD"]}]}
    with _chain(tmp_path, processes=processes, accept="signed", e2e_gap_wait=3.0) as c:
        with mccs.connect(c.d["AA"].config, "GOOD") as good, mccs.connect(c.d["AA"].config, "BAD") as bad:
            good.send("CCPAY", b"paid")
            bad.send("CCPAY", b"not from GOOD")
            assert [m.data for m in _recv(c.d["CC"].config, "PAY", 1)] == [b"paid"]
            assert json.loads(bad.recv(from_id="CCMCCS", timeout=30).data)["reason"] == "refused"
        assert c.counters("CC").get("refused_not_accepted") == 1
        # AA rotates its key: CC still takes what AA made with the old one, and the new one once trusted
        c.d["CC"].stop()
        with mccs.connect(c.d["AA"].config, "SEND") as s:
            s.send("CCRECV", b"old key")
        wait_until(lambda: _at_bb(tmp_path, "AASEND") == 1, 60, "BB to hold it")
        old = _cli("keys", "show", "-c", str(c.cfg["AA"])).split()
        new = _cli("keys", "rotate", "-c", str(c.cfg["AA"])).split()
        refused = mccs_cli("keys", "trust", "-c", str(c.cfg["CC"]), *new, timeout=60)
        assert refused.returncode == 2 and "--replace" in refused.stderr
        c.d["CC"].start()
        assert [m.data for m in _recv(c.d["CC"].config, "RECV", 1)] == [b"old key"]  # made with the old key
        time.sleep(1.5)  # (AA's daemon reads its key file again within a second)
        with mccs.connect(c.d["AA"].config, "SEND") as s:  # made with a key CC does not trust yet
            s.send("CCRECV", b"too early")
            assert json.loads(s.recv(from_id="CCMCCS", timeout=30).data)["reason"] == "refused"
        # (and maybe a custody probe of AA's daemon). A key is named by one byte of its hash: when the
        # new one's is the old one's (1 in 256), CC tries the old key, and the tag does not verify.
        alike = e2e.key_hint(keys.decode(old[1], "shown")) == e2e.key_hint(keys.decode(new[1], "shown"))
        assert c.counters("CC").get("refused_bad_tag" if alike else "refused_untrusted", 0) >= 1
        _cli("keys", "trust", "-c", str(c.cfg["CC"]), *new, "--replace")
        time.sleep(1.5)  # (and CC its trust file)
        with mccs.connect(c.d["AA"].config, "SEND") as s:
            s.send("CCRECV", b"new key")
        got = _recv(c.d["CC"].config, "RECV", 1)  # after the gap the refused one left (e2e_gap_wait 3 s)
        assert [m.data for m in got] == [b"new key"] and {m.e2e for m in got} == {"sealed"}
        # BB has no key CC trusts: with accept = "signed", what BB sends CC is refused
        with mccs.connect(c.d["BB"].config, "SEND") as s:
            s.send("CCRECV", b"from BB")
        wait_until(lambda: c.counters("CC").get("refused_unsigned", 0) >= 1, 60, "CC to refuse BB's message")
        with mccs.connect(c.d["CC"].config, "RECV") as r:
            assert r.recv(timeout=2) is None


def test_mccs_keys_refuses_a_readable_key_file_and_a_daemon_will_not_start_on_one(tmp_path):
    cfg = write_config(tmp_path, "AA", e2e="sign")
    no_key = mccs_cli("daemon", "-c", str(cfg), timeout=60)
    assert no_key.returncode == 2 and "mccs keys init" in no_key.stderr
    _cli("keys", "init", "-c", str(cfg))
    again = mccs_cli("keys", "init", "-c", str(cfg), timeout=60)
    assert again.returncode == 2 and "rotate" in again.stderr
    (tmp_path / "AA.key").chmod(0o644)
    shown = mccs_cli("keys", "show", "-c", str(cfg), timeout=60)
    assert shown.returncode == 2 and "chmod 600" in shown.stderr
    start = mccs_cli("daemon", "-c", str(cfg), timeout=60)
    assert start.returncode == 2 and "chmod 600" in start.stderr
    check = mccs_cli("daemon", "-c", str(cfg), "--check", timeout=60)
    assert check.returncode == 2 and "FAIL  end-to-end keys" in check.stderr and "chmod 600" in check.stderr
    (tmp_path / "AA.key").chmod(0o600)
    check = mccs_cli("daemon", "-c", str(cfg), "--check", timeout=60)
    assert "ok    end-to-end keys: e2e sign, accept any, 1 key(s) of its own, trusts none" in check.stdout
    bad = mccs_cli("keys", "trust", "-c", str(cfg), "BB", "not-a-key", timeout=60)
    assert bad.returncode == 2 and "not a key" in bad.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", [1 << 19, pytest.param(4 << 20, marks=pytest.mark.slow)], ids=["512KiB", "4MiB"])
def test_a_sealed_file_goes_on_through_a_kill9_of_the_transit_host_and_arrives_sealed(tmp_path, size):
    """The issue's 4 MiB (47 s on 2 cores) is a slow test; 512 KiB runs by default."""
    data = bytearray(random.Random(34).randbytes(size))
    for at in range(0, size, 1 << 18):  # a phrase to look for on the transit host's disk
        data[at:at + len(SECRET)] = SECRET
    (tmp_path / "in.bin").write_bytes(data)
    with _chain(tmp_path, baud=2_000_000, every_host={"max_message": 16 << 20}) as c:
        _cli("send", "-c", str(c.cfg["AA"]), "--as", "SEND", "CCRECV", "--file", str(tmp_path / "in.bin"))

        def half_at_bb():
            with mccs.connect(c.d["BB"].config, None) as q:
                partial = q.status()["receiving"]
            return partial and partial[0]["bytes"] >= size // 2
        wait_until(half_at_bb, 120, "half the file at BB")
        c.d["BB"].kill()
        assert _files_hold(tmp_path, "BB", SECRET) == []
        c.d["BB"].start()
        about = json.loads(_cli("recv", "-c", str(c.cfg["CC"]), "--as", "RECV", "--timeout", "200", "--out",
                                str(tmp_path / "out.bin"), "--json"))
        assert about["bytes"] == size and about["e2e"] == "sealed"
        assert (tmp_path / "out.bin").read_bytes() == data
        wait_until(lambda: not _at_bb(tmp_path, "AASEND"), 60, "BB to hand it all on")
        assert _files_hold(tmp_path, "BB", SECRET) == []
        assert c.counters("CC").get("refused", 0) == 0
