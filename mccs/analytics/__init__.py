"""Trace analytics, the `mccs analyze` command (docs/DESIGN.md sections 6 and 8; docs/ANALYTICS.md).

- `schema`: the versioned schema of summary.json (`mccs-analyze-summary`) and its columns; no Spark.
- `session`: a quiet SparkSession, or an `AnalyzeError` saying what to install.
- `traces`: the trace files found and read as one DataFrame; compaction to Parquet.
- `spark`: the Spark job, trace events in, the summary dict out.
- `report`: the report folder (summary.json, CSV tables, index.html with the verdict); `plots`: its plots.
- `progress`: progress on the terminal.
- `command`: `mccs analyze` itself and `run_analysis()`.

Spark is an extra: `pip install 'mccs[analyze]'` brings pyspark and matplotlib, and Spark needs a
Java 17+ runtime. pyspark is imported only inside the functions that run a job, so the daemon,
the client and the lines work without it, and the commands that need it say what to install.
"""
from __future__ import annotations

INSTALL = "pip install 'mccs[analyze]' (and a Java 17 runtime)"


class AnalyzeError(Exception):
    """A problem the user must fix (no traces, no Spark, no Java): reported without a traceback, exit 2."""


def spark_missing(command: str) -> str | None:
    """None when pyspark can be imported; otherwise the line telling the user of `command`
    (e.g. "mccs analyze") what to install."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return f"{command} needs Spark: {INSTALL}"
    return None
