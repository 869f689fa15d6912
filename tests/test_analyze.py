"""mccs analyze against the trace generator's known answers (local Spark, one session)."""
import json
import subprocess
import sys

import pytest

from tools.analyze import run_analysis
from tools.tracegen import generate

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark():
    from tools.analyze_spark import start_session
    s = start_session("local[2]")
    yield s
    s.stop()


def _same(got, want, path=""):
    if isinstance(want, dict):
        for k, v in want.items():
            _same(got[k], v, f"{path}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{path}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), path
    else:
        assert got == want, path


@pytest.mark.timeout(240)
def test_known_answers_with_wrap_and_malformed(spark, tmp_path):
    answers = generate(tmp_path / "traces", hosts=4, messages=1500, id_space=200, malformed=9,
                       lost=4, pending=3, duplicated=2, rotate_events=4000)
    assert any(f.endswith(".jsonl.gz") for f in answers["files"])
    summary = run_analysis([str(tmp_path / "traces")], out=str(tmp_path / "report"), spark=spark)
    for key in ("directions", "lines", "messages", "hosts"):
        _same(summary[key], answers[key], key)
    _same(summary["input"], {k: answers["input"][k] for k in ("events", "malformed", "window")}, "input")
    assert summary["messages"]["lost"] == 4 and summary["messages"]["duplicated"] == 2
    on_disk = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert on_disk["schema_version"] == 1 and on_disk["messages"]["lost"] == 4
    for name in ("index.html", "directions.csv", "throughput.png", "latency.png", "availability.png"):
        assert (tmp_path / "report" / name).stat().st_size > 0


@pytest.mark.timeout(60)
def test_no_traces_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "mccs.cli", "analyze", str(tmp_path)], capture_output=True,
                       text=True, timeout=50)
    assert r.returncode == 2 and "no trace files" in r.stderr
