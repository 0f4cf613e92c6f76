"""Lake table readers for the tests: Delta Lake's Spark connector, resolved from Maven Central like the
Kafka broker's jars (tests/kafka), and the Spark settings that read Delta tables with it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.kafka.broker import CACHE_ROOT

HERE = Path(__file__).parent
DELTA_VERSION = "4.3.0"


def resolve_delta_jars(version: str = DELTA_VERSION) -> list[Path]:
    """delta-spark and delta-storage (not their Scala: Spark has its own), resolved once and cached."""
    target = CACHE_ROOT / f"delta-{version}"
    if not (target / ".complete").exists():
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(HERE / "pom.xml"), f"-Ddelta.version={version}",
             "dependency:copy-dependencies", "-DincludeScope=runtime", "-DexcludeTransitive=true",
             f"-DoutputDirectory={target}"],
            check=True,
        )
        (target / ".complete").touch()
    return sorted(target.glob("*.jar"))


def delta_spark_config() -> dict[str, str]:
    """What a Spark session needs to read (and time-travel) Delta tables."""
    return {
        "spark.jars": ",".join(str(jar) for jar in resolve_delta_jars()),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }
