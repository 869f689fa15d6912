"""Trace files in, one DataFrame out: finding JSON Lines and Parquet under the paths given,
reading them with the schema's columns (malformed lines marked, not fatal), the --since and
--until times, and compaction to Parquet (`mccs analyze --compact`).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from mccs.analytics import AnalyzeError

JSON_SUFFIXES = (".jsonl", ".jsonl.gz")
URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
FIELDS = (("v", "long"), ("ts", "double"), ("host", "string"), ("line", "string"), ("proto", "string"),
          ("type", "string"), ("dir", "string"), ("kind", "string"), ("seq", "long"), ("origin", "string"),
          ("msg_id", "long"), ("from_id", "string"), ("to_id", "string"), ("user_id", "long"),
          ("bytes", "long"), ("ok", "boolean"), ("retransmit", "boolean"), ("baud", "long"),
          ("hops", "long"), ("via", "string"), ("reason", "string"), ("notice", "string"), ("frames", "long"),
          ("result", "string"), ("duration", "double"))
#: FIELDS as a Spark DDL schema string.
DDL = ", ".join(f"{name} {kind}" for name, kind in FIELDS)


def find_inputs(paths: list[str]) -> tuple[list[str], list[str], list[str]]:
    """(JSON Lines files, Parquet dataset roots, remote URLs) under the given paths."""
    files, roots, urls = [], set(), []
    for p in paths:
        if URL.match(p) and not p.startswith("file://"):
            urls.append(p)
            continue
        base = Path(p.removeprefix("file://"))
        candidates = [base] if base.is_file() else (
            Path(d, f) for d, dirs, names in os.walk(base) for f in names
            if not f.startswith((".", "_")) and not any(x.startswith((".", "_")) for x in Path(d).parts[-1:]))
        for f in candidates:
            if f.name.endswith(JSON_SUFFIXES):
                files.append(str(f.resolve()))
            elif f.name.endswith(".parquet"):
                root = f.parent
                while "=" in root.name and root.parent != root:
                    root = root.parent
                roots.add(str(root.resolve()))
    return sorted(files), sorted(roots), urls


def require_inputs(paths: list[str]) -> tuple[list[str], list[str], list[str]]:
    """find_inputs(), or a clear error when there is nothing to read: said before Spark starts
    (a JVM's start takes 10 s and more), as well as when the events are loaded."""
    files, roots, urls = find_inputs(paths)
    if not (files or roots or urls):
        raise AnalyzeError(f"no trace files (*.jsonl, *.jsonl.gz or Parquet from --compact) under "
                           f"{', '.join(paths)}: give the trace_dir of a daemon (or a folder above several)")
    return files, roots, urls


def load_events(spark, paths: list[str]):
    """All events as one DataFrame of the schema's columns plus `bad` (malformed), and what was read."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    files, roots, urls = require_inputs(paths)
    frames = []
    if files or urls:
        schema = StructType.fromDDL(DDL + ", _corrupt_record string")
        reader = spark.read.schema(schema).option("mode", "PERMISSIVE")
        if files:
            frames.append(_checked(reader.json(files)))
        for url in urls:
            frames.append(_checked(reader.option("recursiveFileLookup", "true")
                                   .option("pathGlobFilter", "*.{jsonl,jsonl.gz}").json(url)))
    for root in roots:
        df = spark.read.option("basePath", root).parquet(root)
        # Parquet compacted before a field was added to FIELDS lacks its column: null, as in JSON
        frames.append(df.select(*[(F.col(n) if n in df.columns else F.lit(None)).cast(k).alias(n) for n, k in FIELDS],
                                F.lit(False).alias("bad")))
    events = frames[0]
    for df in frames[1:]:
        events = events.unionByName(df)
    fmt = "+".join(n for n, present in (("jsonl", files or urls), ("parquet", roots)) if present)
    return events, {"files": len(files), "parquet_datasets": len(roots), "urls": len(urls), "format": fmt}


def _checked(df):
    """Mark lines that are not JSON objects of the schema, or lack ts, host or a known type."""
    from pyspark.sql import functions as F
    bad = (F.col("_corrupt_record").isNotNull() | F.col("ts").isNull() | F.col("host").isNull()
           | ~F.coalesce(F.col("type").isin("frame", "msg", "line", "call"), F.lit(False)))
    return df.select(*[n for n, _ in FIELDS], bad.alias("bad"))


def parse_time(value: str | float | None) -> float | None:
    """--since/--until: epoch seconds or ISO 8601 (UTC unless it says otherwise)."""
    if value is None or isinstance(value, (int, float)):
        return value
    try:
        return float(value)
    except ValueError:
        pass
    from datetime import datetime, timezone
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise AnalyzeError(f"not a time: {value!r} (use ISO 8601 like 2026-11-22T09:00:00 or epoch seconds)")
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()


def compact(spark, paths: list[str], out: str) -> dict:
    """Rewrite the traces' valid events as Parquet partitioned by host and UTC date under `out`."""
    from pyspark.sql import functions as F
    events, read = load_events(spark, paths)
    events = events.persist()
    malformed = events.filter(F.col("bad")).count()
    good = events.filter(~F.col("bad")).drop("bad").withColumn(
        "date", F.date_format(F.from_unixtime(F.col("ts")), "yyyy-MM-dd"))
    good.repartition("host", "date").write.mode("overwrite").partitionBy("host", "date").parquet(out)
    n = events.count() - malformed
    events.unpersist()
    return {**read, "events": n, "malformed": malformed, "out": str(out)}
