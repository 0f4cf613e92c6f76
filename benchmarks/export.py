"""A 1M-row table into a Spark DataFrame: engine's export (Parquet from a store snapshot, read by Spark)
against the row path (scan the store, decode each value, `spark.createDataFrame(rows, schema)`).

    .venv/bin/python -m benchmarks.export [--rows 1000000] [--rounds 2]

The table is `key -> Product(sku, units, price)` in 4 RocksDB partitions, written straight into the stores
(no broker needed). Both contenders start from the same stores and end with the same Spark action, an
aggregate that reads every row, so neither can stay lazy. Rounds alternate; the Spark session is shared.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import engine
from benchmarks.common import median
from engine import export
from engine.stores.rocksdb import RocksDBStoreBackend


@dataclass
class Product:
    sku: str
    units: int
    price: float


def build(rows: int, root: Path) -> tuple[engine.App, engine.Settings]:
    app = engine.App("bench-export", store="rocksdb://", data_dir=root)
    table = app.Table("products", key_type=str, value_type=Product, partitions=4)
    settings = app.settings()
    backend = RocksDBStoreBackend("rocksdb://", settings.data_dir / settings.app_id)
    stores = [backend.open(table.name, n) for n in range(4)]
    encode_key, encode_value = table.key_codec.encode, table.value_codec.encode
    for start in range(0, rows, 100_000):
        batches: list[dict[bytes, bytes | None]] = [{} for _ in stores]
        for i in range(start, min(start + 100_000, rows)):
            key = encode_key(f"sku-{i:08d}")
            value = encode_value(Product(f"sku-{i:08d}", i % 97, (i % 1000) / 10))
            assert key is not None
            assert value is not None
            batches[i % 4][key] = value
        for store, batch in zip(stores, batches, strict=True):
            store.write(batch, start)
    for store in stores:
        store.close()
    return app, settings


def action(frame: Any) -> tuple[int, int]:
    from pyspark.sql import functions as F

    row = frame.agg(F.count("*").alias("n"), F.sum("units").alias("units")).first()
    return row["n"], row["units"]


Timed = tuple[float, tuple[int, int]]


def engine_path(spark: Any, app: engine.App, settings: engine.Settings, out: Path) -> Timed:
    started = time.perf_counter()
    export.export_from_store(app, settings, "products", out)
    result = action(export.read_export(spark, out))
    return time.perf_counter() - started, result


def row_path(spark: Any, app: engine.App, settings: engine.Settings) -> Timed:
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    schema = StructType([StructField("key", StringType(), False), StructField("sku", StringType()),
                         StructField("units", LongType()), StructField("price", DoubleType())])
    table = app.tables["products"]
    started = time.perf_counter()
    rows = []
    with export.from_store(table, settings) as snapshot:
        decode_key, decode_value = table.key_codec.decode, table.value_codec.decode
        for view in snapshot.views.values():
            for raw_key, raw_value in view.items():
                product = decode_value(raw_value)
                rows.append((decode_key(raw_key), product.sku, product.units, product.price))
    result = action(spark.createDataFrame(rows, schema))
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="engine-bench-export-"))
    spark = None
    try:
        started = time.perf_counter()
        app, settings = build(args.rows, root)
        print(f"built {args.rows:,} rows in 4 RocksDB partitions in {time.perf_counter() - started:.1f}s")
        spark = export.local_session("bench-export")
        action(spark.range(10).selectExpr("id as units"))  # warm the JVM before timing anything
        engine_times, row_times = [], []
        for round_ in range(args.rounds):
            took, result = engine_path(spark, app, settings, root / f"out-{round_}")
            assert result[0] == args.rows, result
            engine_times.append(took)
            print(f"round {round_ + 1}: engine export -> DataFrame {took:.2f}s", flush=True)
            took, again = row_path(spark, app, settings)
            assert again == result, (again, result)
            row_times.append(took)
            print(f"round {round_ + 1}: createDataFrame(rows)     {took:.2f}s", flush=True)
        engine_s, rows_s = median(engine_times), median(row_times)
        print(f"\n{args.rows:,} rows to a Spark DataFrame (median of {args.rounds}): engine {engine_s:.2f}s, "
              f"rows {rows_s:.2f}s; engine is {rows_s / engine_s:.1f}x faster")
    finally:
        if spark is not None:
            export.stop_session(spark)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
