"""`mccs bench calls --uucp`: Taylor UUCP over the emulated Hayes modems, beside MCCS's figures."""
from __future__ import annotations

import shutil

import pytest

import mccs.testbed.bench_uucp as bench_uucp
from mccs.testbed.bench_bulk import which
from mccs.testbed.bench_calls import SIZE


@pytest.mark.timeout(30)
def test_without_uucico_the_comparison_says_so_and_does_not_fail(monkeypatch, tmp_path):
    monkeypatch.setattr(bench_uucp, "which", lambda program: None)
    got = bench_uucp.compare(tmp_path, 9600, runs=1, burst=1)
    assert got == {"skipped": "uucico not installed (apt-get install uucp)"}
    assert "uucico not installed" in "\n".join(bench_uucp.side_by_side({"uucp": got}))


@pytest.mark.slow  # about 30 s: five calls, each hung up with the modem's escape (guard times)
@pytest.mark.timeout(240)
@pytest.mark.skipif(not (shutil.which("uucico") or which("uucico")), reason="uucico not installed")
def test_a_tiny_uucp_run_over_the_emulated_modem_gives_sane_figures(tmp_path):
    out = bench_uucp.measure(tmp_path, 9600, runs=1, burst=3)  # raises if a file came different or not at all
    assert 0 < out["setup_delivery_s"] < 30
    assert 40 <= out["modem_bytes_per_call"] <= 200  # ATZ, ATE0V1, ATD, +++, ATH0 and their answers
    assert 50 <= out["empty_call_line_bytes"] <= 2000 and out["protocol"] != "?"
    assert 0 < out["burst_payload_share"] < out["burst_line_share"] <= 1.0
    assert (tmp_path / "BB" / "pub" / "one0").read_bytes() == b"A" * SIZE  # byte-identical
    assert len(list((tmp_path / "BB" / "pub").iterdir())) == 1 + 3
