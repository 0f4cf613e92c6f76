"""A large table to a Delta Lake and to an Iceberg table: a full export, then an incremental one after 1% of
the keys changed (updates and deletes), each timed and with the peak RSS of the process that exported.

    .venv/bin/python -m benchmarks.lake_export [--rows 10000000] [--formats delta,iceberg] [--broker H:P]

The table is `key -> Product(sku, units, price)` in 4 RocksDB partitions. Its changelog is produced to a
Kafka topic (a broker is started if none is given) and the same records written into the stores with their
offsets, as a worker's would be; the changes likewise. Each export runs `engine export` itself in a
fresh process from the data dir, so its peak RSS is the export's alone. The incremental export reads the
changed keys from the changelog and replaces their rows (engine.export.rewrite); the benchmark checks the
lake table's row count after each.
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
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaProducer

import engine
from benchmarks.common import broker, create_topics, parser
from engine.stores.rocksdb import RocksDBStoreBackend

if TYPE_CHECKING:
    from collections.abc import Iterable

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


async def write(bootstrap: str, data_dir: Path, changes: Iterable[tuple[int, Product | None]],
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
        pending = iter(changes)
        while chunk := list(islice(pending, BATCH)):
            batches: list[dict[bytes, bytes | None]] = [{} for _ in stores]
            for i, product in chunk:
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


# Runs the CLI, then reports on stderr the seconds its command took (imports and start-up apart) and the
# process's peak RSS in KB: VmHWM, which starts afresh at exec (ru_maxrss would carry the parent's, forked).
MEASURED = ("import sys, time\nfrom cli.main import main\nstarted = time.perf_counter()\n"
            "code = main(sys.argv[1:])\ntook = time.perf_counter() - started\n"
            "peak = next(line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM'))\n"
            "print(took, peak, file=sys.stderr)\nsys.exit(code)")


def export(bootstrap: str, data_dir: Path, target: str) -> tuple[float, float, float, str]:
    """`engine export` in its own process: the process's seconds, the export command's, its peak RSS in MB,
    and what it printed."""
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
    command, peak_kb = result.stderr.strip().splitlines()[-1].split()
    return took, float(command), int(peak_kb) / 1024, result.stdout.strip()


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
            rows = ((i, Product(f"sku-{i:09d}", i % 97, (i % 1000) / 10)) for i in range(args.rows))
            asyncio.run(write(bootstrap, data_dir, rows, offsets))
            print(f"built {args.rows:,} rows (changelog and stores) in {time.perf_counter() - started:.0f}s")
            targets = {"delta": f"delta:{lake}", "iceberg": "iceberg:bench.products"}
            formats = args.formats.split(",")
            for name in formats:
                took, command, rss, said = export(bootstrap, data_dir, targets[name])
                assert lake_rows(targets[name], data_dir) == args.rows
                print(f"{name:8} full export:      {command:6.1f}s ({took:.1f}s with start-up), peak RSS "
                      f"{rss:5.0f} MB  ({said})")
            changed = max(args.rows // 100, 1)
            step = args.rows // changed
            changes: list[tuple[int, Product | None]] = [  # spread over every partition
                (i, None if n % 10 == 0 else Product(f"sku-{i:09d}", i % 89 + 1, 1.5))
                for n in range(changed) if (i := n * step + n % PARTITIONS) < args.rows]
            asyncio.run(write(bootstrap, data_dir, changes, offsets))
            deleted = sum(1 for _, product in changes if product is None)
            for name in formats:
                took, command, rss, said = export(bootstrap, data_dir, targets[name])
                assert lake_rows(targets[name], data_dir) == args.rows - deleted
                print(f"{name:8} incremental (1%): {command:6.1f}s ({took:.1f}s with start-up), peak RSS "
                      f"{rss:5.0f} MB  ({said})")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
