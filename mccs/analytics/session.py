"""The Spark session of `mccs analyze`: a quiet one, or a message saying what to install.

Spark logs at length and its JVM prints a warning of its own before any log level applies;
the user of a command wants errors only, so the log4j configuration and a filter on the
JVM's stderr keep the rest out.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from mccs.analytics import INSTALL, AnalyzeError

# Errors only. The gateway's own level, set equal to the root's, stops Spark announcing that it
# changed the root's ("Setting default log level ...", printed as PySpark counts as a shell).
LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


# The JVM of a local master runs every task. The analysis is a batch job on a few cores, where
# the default collector (G1) spends a core's share on concurrent marking beside the task threads:
# the throughput collector took 10 to 15% off a Parquet analysis of 10 million events in a JVM of
# its own, and 7 to 9% off JSON Lines in `mccs bench analyze`, on `local[2]` (BENCHMARKS.md, issue 15).
LOCAL_GC = "-XX:+UseParallelGC"
JAVA_OPTION_VARIABLES = ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")


def _gc_chosen() -> bool:
    """Has the user chosen a collector for every JVM (two choices stop the JVM from starting)?"""
    return any(re.search(r"-XX:\+Use\w*GC\b", os.environ.get(v, "")) for v in JAVA_OPTION_VARIABLES)


def java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(shutil.which("java") or (home and Path(home, "bin", "java").exists()))


def start_session(master: str | None = None, driver_memory: str = "3g"):
    """A quiet SparkSession on `master` (default local[*])."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise AnalyzeError(f"Spark is not installed: {INSTALL}") from None
    if not java_available():
        raise AnalyzeError("Spark needs Java 17 or later and none was found: install one "
                           "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    log4j = Path(tempfile.gettempdir(), "mccs-analyze-log4j2.properties")
    log4j.write_text(LOG4J)
    master = master or "local[*]"
    options = {"spark.master": master, "spark.app.name": "mccs-analyze", "spark.ui.enabled": "false",
               "spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC",
               # the analysis's collect_list and percentile_approx have a few thousand groups at
               # most; past 128 Spark would leave its hash aggregation for a sort
               "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "4096",
               "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
               "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}",
               "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}"}
    if master.startswith("local"):
        options["spark.driver.memory"] = driver_memory
        if not _gc_chosen():
            options["spark.driver.extraJavaOptions"] += f" {LOCAL_GC}"
    _start_jvm(SparkConf().setAll(list(options.items())))
    # pyspark types `map` as a dict of any option value, which (dict being invariant) refuses our dict
    # of str, though it only reads it
    spark = SparkSession.builder.config(map=options).getOrCreate()  # type: ignore[arg-type]
    spark.sparkContext.setLogLevel("ERROR")
    # four tasks a core: the shuffles are small, and Spark's default of 200 is for clusters
    spark.conf.set("spark.sql.shuffle.partitions", str(max(8, 4 * spark.sparkContext.defaultParallelism)))
    return spark


def _start_jvm(conf) -> None:
    """Start Spark's JVM (once per process) with its stderr through a filter: the JVM itself prints
    `WARNING: Using incubator modules` for a module Spark adds, before any log level applies."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway
    if SparkContext._gateway is not None:
        return
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    except TypeError:  # a pyspark without popen_kwargs: no filter, the warning shows, nothing else changes
        return
    threading.Thread(target=_pass_stderr, args=(gateway.proc.stderr,), daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


def _pass_stderr(pipe) -> None:
    for line in pipe:
        if not line.startswith(b"WARNING: Using incubator modules"):
            sys.stderr.buffer.write(line)
            sys.stderr.flush()
