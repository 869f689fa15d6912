"""`mccs bench bulk` (issue 12): its help, and a tiny run with the peers this machine has."""
from __future__ import annotations

import json
import subprocess

import pytest

from mccs.testbed.bench_bulk import PEERS, missing
from mccs.testbed.hosts import mccs_cli


def bench_bulk(*args: str, timeout: float) -> subprocess.CompletedProcess:
    return mccs_cli("bench", "bulk", *args, timeout=timeout)


@pytest.mark.timeout(30)
def test_help_names_the_peers_the_targets_and_the_install_command():
    p = bench_bulk("--help", timeout=25)
    assert p.returncode == 0
    for words in ("ZMODEM", "UUCP", "--ber", "--size", "--runs", "--peers", "apt-get install lrzsz uucp", "18 min"):
        assert words in p.stdout


@pytest.mark.timeout(30)
def test_a_missing_program_is_named_with_its_install_command(monkeypatch):
    import mccs.testbed.bench_bulk as bb
    monkeypatch.setattr(bb, "which", lambda program: None)
    assert "sz and rz not found" in missing("zmodem") and "apt-get install lrzsz uucp" in missing("zmodem")
    assert "uucico" in missing("uucp") and missing("async") is None


@pytest.mark.timeout(240)
def test_a_tiny_run_gives_sane_efficiencies_for_every_peer_installed():
    peers = [p for p in PEERS if missing(p) is None]
    p = bench_bulk("--baud", "115200", "--size", "4K", "--ber", "0", "--peers", ",".join(PEERS), "--json",
                   timeout=230)
    assert p.returncode in (0, 1), p.stderr  # a target may be missed on so small a payload
    doc = json.loads(p.stdout)
    assert doc["size"] == 4096 and doc["bauds"] == [115200] and doc["bers"] == [0.0]
    assert {"nproc", "cpu", "python"} <= set(doc["machine"])
    by_peer = {r["peer"]: r for r in doc["results"]}
    assert set(by_peer) == set(PEERS)
    for peer, r in by_peer.items():
        if peer not in peers:
            assert r["skipped"] and "apt-get install" in r["skipped"] and r["efficiency"] is None
            continue
        assert not r["errors"], r["errors"]
        assert 0 < r["efficiency"] <= 1, r
        assert r["bytes_per_s"] <= 115200 / 10 and len(r["seconds"]) == 1
    assert 0.5 < doc["bsc_ceiling"]["ceiling"] < 1
    if "bsc" in peers:  # the relay's own floor: a bare exchange loses only turnarounds, never bytes
        assert 0.5 < doc["bsc_floor"]["115200"] <= doc["bsc_ceiling"]["ceiling"]
    for ratio in doc["ratios"]:
        assert ratio["ratio"] > 0
    for t in doc["targets"]:
        assert t["met"] in (True, False) and t["value"] > 0
