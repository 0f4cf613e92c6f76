"""Exports into Spark: a DataFrame over an export's Parquet files, and a local session for the CLI and
examples. pyspark is an optional extra, imported here only.

Parquet written by pyarrow is Spark's fastest way in (measured in ../shared/notes and benchmarks/export.py):
Spark reads the columns itself, in the JVM, with no Python row crossing over. The schema is passed
explicitly (from the files' Arrow schema) so Spark does not sample the files, and the manifest's file list
is read, not the directory, so a half-written or older export is never mixed in.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.export import pyspark_private
from engine.export.optional import needs
from engine.export.parquet import read_manifest

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engine.export.parquet import ExportManifest


def spark_schema(path: Path | str, manifest: ExportManifest | None = None) -> Any:
    """The Spark StructType of an export, from the Arrow schema stored in its files."""
    manifest = manifest or read_manifest(path)
    with needs("pyarrow", "Spark export"):
        import pyarrow.parquet as parquet
    with needs("pyspark", "Spark export"):
        import pyspark.sql.pandas.types as types
    arrow_schema = parquet.read_schema(Path(path) / manifest.files[0].path)
    return types.from_arrow_schema(arrow_schema)


def read_export(spark: Any, path: Path | str) -> Any:
    """A DataFrame over the files of a finished export at `path` (see engine.export.parquet)."""
    manifest = read_manifest(path)
    files = [str(Path(path) / f.path) for f in manifest.files]
    return spark.read.schema(spark_schema(path, manifest)).parquet(*files)


# Spark's log4j configuration for the JVM it starts, errors only: with its default one it prints WARN lines
# before setLogLevel can run. Its own loggers get a level of their own too: a shell (pyspark) whose logger
# has no configured level takes WARN, and prints that it does whenever the root's level differs.
QUIET_LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
"""


def local_session(name: str = "engine", cores: int = 2, options: Mapping[str, str] | None = None) -> Any:
    """A quiet local Spark session on loopback (no UI), with any further `options` (the jars and extensions
    that read Delta tables, say; JVM options in `spark.driver.extraJavaOptions` join the session's own
    logging option); stop it when done."""
    with needs("pyspark", "Spark export"):
        import pyspark.sql as sql
    logging.getLogger("py4j").setLevel(logging.WARNING)  # an INFO line per connection otherwise
    config = Path(tempfile.gettempdir()) / "engine-spark-log4j2.properties"
    if not config.exists() or config.read_text() != QUIET_LOG4J:  # written whole: others may read it now
        written = config.with_name(f"{config.name}.{os.getpid()}")
        written.write_text(QUIET_LOG4J)
        written.replace(config)
    settings = dict(options or {})
    more_java = settings.pop("spark.driver.extraJavaOptions", "")
    java_options = f"-Dlog4j2.configurationFile=file:{config} {more_java}"
    builder = sql.SparkSession.builder
    for option, value in settings.items():
        builder = builder.config(option, value)
    session = (
        builder.master(f"local[{cores}]").appName(name)
        .config("spark.driver.extraJavaOptions", java_options.strip())
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(cores * 2))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def stop_session(session: Any) -> None:
    """Stop the session and the JVM pyspark started for it (`stop()` alone leaves the JVM running until
    Python exits)."""
    gateway, process = pyspark_private.launched_jvm(session.sparkContext)
    session.stop()
    if gateway is not None:
        pyspark_private.forget_gateway(gateway)
    if process is not None:
        process.terminate()
        process.wait(timeout=30)
