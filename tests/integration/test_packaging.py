"""The installed product: what `pip install mccs` puts in site-packages and what the `mccs`
console script imports. Only the product's packages are installed (no tests); Spark is the
`analyze` extra, and the commands that need it say what to install."""
import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "pip install 'mccs[analyze]' (and a Java 17 runtime)"

# Imports every command's module and builds every command's parser (which imports what the
# command's arguments need, the bench kinds included), then names any module of the tests (and
# pyspark, which only running a Spark job may load).
IMPORT_EVERY_COMMAND = """
import importlib, json, sys
import mccs.cli
from mccs.testbed.bench import KINDS
mods = {m for m, _ in mccs.cli.COMMANDS.values()} | {f"mccs.testbed.bench_{k}" for k in KINDS}
for m in sorted(mods):
    importlib.import_module(m)
for name in mccs.cli.COMMANDS:
    mccs.cli.build_parser(name)
import mccs.analytics.command, mccs.analytics.spark, mccs.analytics.schema, mccs.testbed.tracegen
print(json.dumps({"tests": sorted(m for m in sys.modules if m.split(".")[0] in ("tests", "conftest")),
                  "pyspark": sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "matplotlib")),
                  "mccs": mccs.cli.__file__}))
"""


def _run(args, env_path, cwd, timeout=60, python_flags=()):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join(map(str, env_path))
    return subprocess.run([sys.executable, *python_flags, *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


@pytest.mark.timeout(60)
def test_commands_import_nothing_from_the_tests_and_no_spark():
    """Run from the checkout, where the tests could be imported: no command does."""
    r = _run(["-c", IMPORT_EVERY_COMMAND], [ROOT], ROOT)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["tests"] == []
    assert got["pyspark"] == []          # building any command's parser loads no Spark


@pytest.fixture
def no_spark(tmp_path):
    """A folder that, first on PYTHONPATH, makes `import pyspark` fail as if it were not installed."""
    d = tmp_path / "no-spark"
    (d / "pyspark").mkdir(parents=True)
    (d / "pyspark" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pyspark'\", "
                                               "name='pyspark')\n")
    return d


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command, args, message", [
    (["analyze"], ["TRACES"], f"mccs analyze needs Spark: {INSTALL}"),
    (["analyze"], ["TRACES", "--compact", "--out", "OUT"], f"mccs analyze needs Spark: {INSTALL}"),
    (["bench", "analyze"], ["--dir", "OUT", "--events", "1000"], f"mccs bench analyze needs Spark: {INSTALL}"),
    (["demo"], ["--dir", "OUT"], f"mccs demo needs Spark: {INSTALL}; or run it with --no-analyze"),
], ids=["analyze", "analyze-compact", "bench-analyze", "demo"])
def test_without_spark_says_what_to_install(no_spark, tmp_path, command, args, message):
    traces = tmp_path / "traces"
    traces.mkdir()
    out = tmp_path / "out"
    args = [str(traces) if a == "TRACES" else str(out) if a == "OUT" else a for a in args]
    r = _run(["-m", "mccs.cli", *command, *args], [no_spark, ROOT], tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", message + "\n")
    assert not out.exists()             # said at once: no traces generated, no network run


@pytest.mark.timeout(60)
def test_without_spark_the_rest_works(no_spark, tmp_path):
    r = _run(["-m", "mccs.cli", "analyze", "--help"], [no_spark, ROOT], tmp_path)
    assert r.returncode == 0 and "TRACE_PATH" in r.stdout, r.stderr
    r = _run(["-c", IMPORT_EVERY_COMMAND], [no_spark, ROOT], tmp_path)
    assert r.returncode == 0, r.stderr


@pytest.mark.timeout(180)
def test_wheel_ships_the_product_and_nothing_else(tmp_path):
    """Build the wheel from a copy of the sources (so the checkout gets no build/ or egg-info),
    look inside, then run every command's import from the unpacked wheel alone."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("mccs", "linedrivers", "checkpoint", "tests"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"),
                        str(src)], capture_output=True, text=True, timeout=170)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = glob.glob(str(tmp_path / "dist" / "mccs-*.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        z.extractall(tmp_path / "site")
    tops = {n.split("/")[0] for n in names}
    assert tops - {"mccs", "linedrivers", "checkpoint"} == {n.split("/")[0] for n in names if ".dist-info/" in n}, tops
    for module in ("mccs/analytics/spark.py", "mccs/analytics/schema.py", "mccs/analytics/command.py",
                   "mccs/testbed/vserial.py", "mccs/testbed/loopback.py", "mccs/testbed/demo.py",
                   "mccs/testbed/bench.py", "mccs/testbed/traffic.py", "mccs/testbed/tracegen.py"):
        assert module in names
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    spark = [req for req in requires if req.startswith(("pyspark", "matplotlib"))]
    assert len(spark) == 2 and all(req.endswith('extra == "analyze"') for req in spark), requires
    assert any(req.startswith("pyserial") and ";" not in req for req in requires), requires

    # The unpacked wheel and the venv's third-party packages, nothing of the checkout: python -S
    # leaves out site (and the editable install's path hooks), the working folder is elsewhere.
    path = [tmp_path / "site", sysconfig.get_paths()["purelib"]]
    r = _run(["-c", "import tests"], path, tmp_path, python_flags=["-S"])
    assert r.returncode == 1 and "No module named 'tests'" in r.stderr, r.stderr
    r = _run(["-c", IMPORT_EVERY_COMMAND], path, tmp_path, python_flags=["-S"])
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["tests"] == [] and got["mccs"].startswith(str(tmp_path / "site")), got


@pytest.mark.timeout(60)
def test_creating_a_checkpoint_loads_no_numpy(tmp_path):
    """sqlite-utils would import numpy (and pandas) if it could, 18 MB a new daemon keeps for
    nothing; hidden while it loads, and importable as ever afterwards. In a process of its own,
    since this one may have numpy already."""
    import subprocess
    import sys
    pytest.importorskip("numpy")  # without numpy there is nothing to hide
    code = ("import sys; from checkpoint.store import Checkpoint; Checkpoint(sys.argv[1], 'AA').close(); "
            "loaded = 'numpy' in sys.modules; import numpy; print(loaded, numpy.__name__)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "AA.db")], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    assert out == ["False", "numpy"]
