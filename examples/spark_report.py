"""Batch analytics with PySpark on exported table snapshots: the batch side of the pipeline.

Runs three examples on the in-memory broker with generated input and RocksDB stores in a temporary data
dir, exports their tables (the offline path: `engine export --data-dir`), and asks Spark:
- the top words (examples.wordcount's `word-counts`);
- products under their reorder threshold (examples.inventory's `stock`);
- the busiest 10-minute windows (examples.retail's windowed `units-sold`).

    bash examples/spark_report.sh        (zero setup: installs the spark extra first)
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from engine import export, testing

from . import inventory, retail, wordcount
from .demo import WORDS, run_example

START = 1_767_225_600  # 2026-01-01T00:00:00Z: event times of the generated till sales


def lines(count: int = 3000) -> list[str]:
    rng = random.Random(7)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(count)]


def till_sales(count: int = 5000) -> list[retail.Sale]:
    """Two hours of sales, busier around lunch, arriving a little out of order (within the grace)."""
    rng = random.Random(5)
    times = sorted(START + rng.triangular(0, 7200, 4200) for _ in range(count))
    sales = [retail.Sale(f"sku-{rng.randint(1, 12)}", rng.randint(1, 3), 2.5, round(t, 3)) for t in times]
    for i in range(0, len(sales) - 1, 7):  # swap neighbours: out of order by seconds
        sales[i], sales[i + 1] = sales[i + 1], sales[i]
    return sales


def stock_moves() -> tuple[list[inventory.Shipment], list[inventory.Sale]]:
    rng = random.Random(3)
    skus = [f"sku-{n}" for n in range(1, 9)]
    shipments = [inventory.Shipment(sku, 40) for sku in skus]
    sold = [inventory.Sale(rng.choice(skus[:5]), rng.randint(1, 4)) for _ in range(70)]
    return shipments, sold


async def build_state(data_dir: Path) -> None:
    """Run the three examples into RocksDB stores under `data_dir`."""
    text = lines()
    words = Counter(w for line in text for w in line.split())

    async def feed_words() -> None:
        for line in text:
            await wordcount.lines.send(value=line)

    await run_example(wordcount.app, feed_words, lambda: dict(wordcount.counts.items()) == words,
                      store="rocksdb://", data_dir=data_dir)

    shipments, sold = stock_moves()
    expected = Counter({s.sku: s.quantity for s in shipments})
    for sale in sold:
        expected[sale.sku] -= sale.quantity

    async def feed_stock() -> None:
        for shipment in shipments:
            await inventory.shipments.send(key=shipment.sku, value=shipment)
        await testing.eventually(lambda: len(inventory.stock) == len(shipments), 10)
        for sale in sold:
            await inventory.sales.send(key=sale.sku, value=sale)

    await run_example(inventory.app, feed_stock, lambda: dict(inventory.stock.items()) == dict(expected),
                      store="rocksdb://", data_dir=data_dir)

    sales = till_sales()
    total = sum(s.quantity for s in sales)

    async def feed_sales() -> None:
        for sale in sales:
            await retail.sales.send(key=sale.sku, value=sale)

    def all_tallied() -> bool:
        return sum(v for _, v in retail.units_sold.table.items()) == total

    await run_example(retail.app, feed_sales, all_tallied, store="rocksdb://", data_dir=data_dir)


def export_all(data_dir: Path, out: Path) -> dict[str, Path]:
    """Offline exports of the tables the report reads."""
    paths = {}
    for app, table in ((wordcount.app, "word-counts"), (inventory.app, "stock"), (retail.app, "units-sold")):
        settings = app.settings({"data_dir": data_dir})
        paths[table] = out / table
        manifest = export.export_from_store(app, settings, table, paths[table])
        print(f"exported {manifest.rows} rows of {table} ({len(manifest.files)} partitions)")
    return paths


def report(spark: Any, paths: dict[str, Path]) -> dict[str, list[tuple[Any, ...]]]:
    """The three questions, answered by Spark; returned as plain tuples (and printed)."""
    from pyspark.sql import functions as F  # Spark's own convention

    words = export.read_export(spark, paths["word-counts"])
    top = words.orderBy(F.desc("value"), "key").limit(5).collect()
    stock = export.read_export(spark, paths["stock"])
    low = stock.where(F.col("value") < inventory.REORDER_BELOW).orderBy("value", "key").collect()
    units = export.read_export(spark, paths["units-sold"])
    busiest = (units.groupBy(F.date_format("window_start", "HH:mm").alias("start"),
                             F.date_format("window_end", "HH:mm").alias("end"))
               .agg(F.sum("value").alias("units")).orderBy(F.desc("units")).limit(3).collect())
    results = {
        "top_words": [(r["key"], r["value"]) for r in top],
        "low_stock": [(r["key"], r["value"]) for r in low],
        "busiest_windows": [(r["start"], r["end"], r["units"]) for r in busiest],
    }
    print("top words:", ", ".join(f"{w} ({n})" for w, n in results["top_words"]))
    print(f"under the reorder threshold of {inventory.REORDER_BELOW}:",
          ", ".join(f"{sku} ({n} left)" for sku, n in results["low_stock"]) or "none")
    print("busiest 10-minute windows (UTC):",
          ", ".join(f"{a}-{b}: {n} units" for a, b, n in results["busiest_windows"]))
    return results


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="engine-spark-report-") as tmp:
        root = Path(tmp)
        asyncio.run(build_state(root / "data"))
        paths = export_all(root / "data", root / "exports")
        spark = export.local_session("spark-report")
        try:
            report(spark, paths)
        finally:
            export.stop_session(spark)


if __name__ == "__main__":
    main()
