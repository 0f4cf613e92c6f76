"""examples/spark_report.py end to end in a real local Spark session, against answers computed by hand from
the same generated input."""

from __future__ import annotations

import asyncio
from collections import Counter

from examples import inventory, spark_report


def test_report_answers_from_exported_snapshots(tmp_path, spark):
    asyncio.run(spark_report.build_state(tmp_path / "data"))
    paths = spark_report.export_all(tmp_path / "data", tmp_path / "exports")
    results = spark_report.report(spark, paths)

    words = Counter(w for line in spark_report.lines() for w in line.split())
    assert results["top_words"] == sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:5]

    shipments, sold = spark_report.stock_moves()
    stock = Counter({s.sku: s.quantity for s in shipments})
    for sale in sold:
        stock[sale.sku] -= sale.quantity
    low = sorted(((sku, n) for sku, n in stock.items() if n < inventory.REORDER_BELOW),
                 key=lambda kv: (kv[1], kv[0]))
    assert results["low_stock"] == low
    assert low, "the generated sales take some products under the threshold"

    per_window = Counter()
    for sale in spark_report.till_sales():
        per_window[int(sale.at - spark_report.START) // 600] += sale.quantity

    def clock(minutes: int) -> str:
        return f"{minutes // 60 % 24:02d}:{minutes % 60:02d}"

    busiest = sorted(per_window.items(), key=lambda kv: -kv[1])[:3]
    assert results["busiest_windows"] == [(clock(w * 10), clock(w * 10 + 10), n) for w, n in busiest]
