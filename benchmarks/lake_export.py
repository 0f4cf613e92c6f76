"""A large table to a Delta Lake and to an Iceberg table: a full export, then an incremental one after 1% of
the keys changed (updates and deletes), each timed and with the peak RSS of the process that exported.

    .venv/bin/python -m benchmarks.lake_export [--rows 10000000] [--formats delta,iceberg] [--broker H:P]

The table is `key -> Product(sku, units, price)` in 4 RocksDB partitions. Its changelog is produced to a
Kafka topic (a broker is started if none is given) and the same records written into the stores with their
offsets, as a worker's would be; the changes likewise. Each export runs `engine export` itself in a
fresh process from the data dir, so its peak RSS is the export's alone. The incremental export reads the
changed keys from the changelog and MERGEs them; the benchmark checks the Delta table's row count after
each.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaProducer

import engine
from benchmarks.common import broker, create_topics, parser
from engine.stores.rocksdb import RocksDBStoreBackend

PARTITIONS = 4
APP = "bench-lake"
BATCH = 100_000


@dataclass
class Product:
    sku: str
    units: int
    price: float


app = engine.App(os.environ.get("BENCH_LAKE_APP", APP), store="rocksdb://")
products = app.Table("products", key_type=str, value_type=Product, partitions=PARTITIONS)


async def write(bootstrap: str, data_dir: Path, changes: list[tuple[int, Product | None]],
                next_offsets: list[int]) -> None:
    """Each (id, product or None for a delete) to the changelog and the stores, in batches, as a worker's
    checkpoints would: a batch's records and the offset of its last one written together."""
    topic = products.changelog_topic.name
    backend = RocksDBStoreBackend("rocksdb://", data_dir / app.id)
    stores = [backend.open(products.name, n) for n in range(PARTITIONS)]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1024 * 1024)
    await producer.start()
    encode_key, encode_value = products.key_codec.encode, products.value_codec.encode
    try:
        for start in range(0, len(changes), BATCH):
            batches: list[dict[bytes, bytes | None]] = [{} for _ in stores]
            for i, product in changes[start:start + BATCH]:
                key = encode_key(f"sku-{i:09d}")
                assert key is not None
                partition = i % PARTITIONS
                value = None if product is None else encode_value(product)
                batches[partition][key] = value
                await producer.send(topic, value, key=key, partition=partition)
                next_offsets[partition] += 1
            await producer.flush()
            for number, (store, batch) in enumerate(zip(stores, batches, strict=True)):
                if batch:
                    store.write(batch, next_offsets[number] - 1)
    finally:
        await producer.stop()
        for store in stores:
            store.close()


# Runs the CLI and reports the process's own peak RSS (in KB) on its last line of stderr.
MEASURED = ("import resource, sys\nfrom cli.main import main\ncode = main(sys.argv[1:])\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\nsys.exit(code)")


def export(bootstrap: str, data_dir: Path, target: str) -> tuple[float, float, str]:
    """`engine export` in its own process: seconds, its peak RSS in MB, and what it printed."""
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", MEASURED, "export", "-A", "benchmarks.lake_export:app", "products",
         "--to", target, "--data-dir", str(data_dir), "--broker", f"kafka://{bootstrap}",
         "--loglevel", "WARNING"],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[1],
    )
    took = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"export failed:\n{result.stdout}{result.stderr}")
    peak_kb = int(result.stderr.strip().splitlines()[-1])
    return took, peak_kb / 1024, result.stdout.strip()


def lake_rows(target: str, data_dir: Path) -> int:
    """The row count of the lake table `target`, read with its format's own library."""
    if target.startswith("delta:"):
        from deltalake import DeltaTable

        return int(DeltaTable(target.removeprefix("delta:")).to_pyarrow_dataset().count_rows())
    from engine.export.iceberg import IcebergTarget

    lake = IcebergTarget(target.removeprefix("iceberg:"), app.settings({"data_dir": data_dir}))
    return int(lake.catalog.load_table(lake.name).scan().to_arrow().num_rows)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--formats", default="delta,iceberg")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="engine-bench-lake-"))
    data_dir, lake = root / "data", root / "lake"
    os.environ.pop("ENGINE_DATA_DIR", None)
    if "BENCH_LAKE_APP" not in os.environ:  # a fresh changelog topic each run (the exports run this module)
        os.environ["BENCH_LAKE_APP"] = f"{APP}-{uuid.uuid4().hex[:8]}"
        os.execv(sys.executable, [sys.executable, "-m", "benchmarks.lake_export", *sys.argv[1:]])
    try:
        with broker(args.broker) as bootstrap:
            asyncio.run(create_topics(bootstrap, [products.changelog_topic.name], PARTITIONS))
            offsets = [0] * PARTITIONS
            started = time.perf_counter()
            rows = [(i, Product(f"sku-{i:09d}", i % 97, (i % 1000) / 10)) for i in range(args.rows)]
            asyncio.run(write(bootstrap, data_dir, rows, offsets))
            del rows
            print(f"built {args.rows:,} rows (changelog and stores) in {time.perf_counter() - started:.0f}s")
            targets = {"delta": f"delta:{lake}", "iceberg": "iceberg:bench.products"}
            formats = args.formats.split(",")
            for name in formats:
                took, rss, said = export(bootstrap, data_dir, targets[name])
                assert lake_rows(targets[name], data_dir) == args.rows
                print(f"{name:8} full export:      {took:6.1f}s, peak RSS {rss:6.0f} MB  ({said})")
            changed = max(args.rows // 100, 1)
            step = args.rows // changed
            changes: list[tuple[int, Product | None]] = [  # spread over every partition
                (i, None if n % 10 == 0 else Product(f"sku-{i:09d}", i % 89 + 1, 1.5))
                for n in range(changed) if (i := n * step + n % PARTITIONS) < args.rows]
            asyncio.run(write(bootstrap, data_dir, changes, offsets))
            deleted = sum(1 for _, product in changes if product is None)
            for name in formats:
                took, rss, said = export(bootstrap, data_dir, targets[name])
                assert lake_rows(targets[name], data_dir) == args.rows - deleted
                print(f"{name:8} incremental (1%): {took:6.1f}s, peak RSS {rss:6.0f} MB  ({said})")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
