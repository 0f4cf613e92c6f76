"""Lake table readers for the tests: Delta Lake's and Iceberg's Spark connectors, resolved from Maven Central
like the Kafka broker's jars (tests/kafka), and the Spark settings that read lake tables with them; the
settings of an Iceberg catalog whose warehouse is on an S3 endpoint (the `s3_endpoint` fixture's)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.kafka.broker import CACHE_ROOT, QUICK_JVM

HERE = Path(__file__).parent
DELTA_VERSION, ICEBERG_VERSION = "4.3.0", "1.12.0"


def resolve_lake_jars() -> list[Path]:
    """delta-spark, delta-storage and Iceberg's Spark runtime (not their Scala: Spark has its own),
    resolved once and cached."""
    target = CACHE_ROOT / f"lake-delta-{DELTA_VERSION}-iceberg-{ICEBERG_VERSION}"
    if not (target / ".complete").exists():
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(HERE / "pom.xml"), f"-Ddelta.version={DELTA_VERSION}",
             f"-Diceberg.version={ICEBERG_VERSION}",
             "dependency:copy-dependencies", "-DincludeScope=runtime", "-DexcludeTransitive=true",
             f"-DoutputDirectory={target}"],
            check=True,
        )
        (target / ".complete").touch()
    return sorted(target.glob("*.jar"))


def lake_spark_config() -> dict[str, str]:
    """What a Spark session needs to read (and time-travel) Delta tables, and Iceberg tables by their
    metadata file (`spark.read.format("iceberg").load(table.metadata_location)`), on a JVM tuned for tests."""
    return {
        "spark.jars": ",".join(str(jar) for jar in resolve_lake_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.driver.extraJavaOptions": " ".join(QUICK_JVM),
        # (a table's log is replayed in this many tasks; the default, 50, costs seconds a read on 2 cores)
        "spark.databricks.delta.snapshotPartitions": "1",
    }


S3_BUCKET = "lake"


def s3_environment(endpoint: str) -> dict[str, str]:
    """The environment by which delta-rs and pyarrow reach S3_BUCKET at `endpoint` (a user's AWS_* variables;
    plain HTTP allowed)."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "engine", "AWS_SECRET_ACCESS_KEY": "secret",
            "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}


def s3_catalog(name: str, endpoint: str) -> dict[str, str]:
    """The environment that makes pyiceberg's catalog `name` keep its warehouse in S3_BUCKET at `endpoint`
    (its URI, the SQL database, is set apart)."""
    prefix = f"PYICEBERG_CATALOG__{name}__"
    return {f"{prefix}WAREHOUSE": f"s3://{S3_BUCKET}/warehouse", f"{prefix}S3__ENDPOINT": endpoint,
            f"{prefix}S3__ACCESS_KEY_ID": "engine", f"{prefix}S3__SECRET_ACCESS_KEY": "secret",
            f"{prefix}S3__REGION": "us-east-1"}
