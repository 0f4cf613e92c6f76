"""Writing a table snapshot as Parquet: one file per partition, plus a manifest.

    <path>/part-00000.parquet ...     one per exported partition, each written to a hidden temporary file
                                      and renamed into place, so no reader ever sees half a file
    <path>/_engine_export.json        the manifest, written last (also atomically): table, partitions,
                                      the changelog offset each file reflects, schema and key encoding

The manifest is the commit point: readers (engine.export.spark) read the files it lists, so an export that
died half-way, or files left by an older export with more partitions, are never mixed in. Names starting
with `_` or `.` are skipped by Spark and Hadoop readers of the directory too.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ExportError
from engine.export.columns import KEY, TableColumns
from engine.export.optional import needs
from engine.targets import parse_target

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.export.sources import TableSnapshot
    from engine.stores import StoreView

MANIFEST = "_engine_export.json"
WRITERS = 2
ROW_GROUP = 65_536  # rows per row group: each batch the writer gets is one (pyarrow does not merge them)
FORMAT = "engine-table-export/1"
KEY_LAYOUT = {
    "plain": "the key encoded by the table's key codec",
    "windowed": "4-byte big-endian key length, the key encoded by the table's key codec, 8-byte big-endian "
                "window start in milliseconds plus 2**63",
    "session": "4-byte big-endian key length, the key encoded by the table's key codec, 8-byte big-endian "
               "session start then 8-byte big-endian session end, each in milliseconds plus 2**63",
    "versioned": "4-byte big-endian key length, the key encoded by the table's key codec, 8-byte big-endian "
                 "version time in milliseconds plus 2**63; the value a byte 1 then the value encoded by the "
                 "table's value codec, or a byte 0 alone for a deletion",
}

@dataclass(frozen=True)
class PartitionFile:
    partition: int
    path: str  # relative to the export directory
    rows: int
    changelog_offset: int | None  # the last changelog record the rows reflect (None: empty store)


@dataclass(frozen=True)
class ExportManifest:
    app: str
    table: str
    changelog_topic: str
    source: str
    partitions: int
    files: list[PartitionFile]
    schema: list[dict[str, Any]]
    encoding: dict[str, Any]
    window: dict[str, int] | None
    created_at: str
    format: str = FORMAT
    rows: int = field(default=0)

    @property
    def offsets(self) -> dict[int, int | None]:
        return {f.partition: f.changelog_offset for f in self.files}

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2).encode()

    @classmethod
    def from_json(cls, data: bytes) -> ExportManifest:
        raw = json.loads(data)
        if raw.get("format") != FORMAT:
            raise ExportError(f"not an engine table export (format {raw.get('format')!r}, "
                              f"expected {FORMAT!r})")
        raw["files"] = [PartitionFile(**f) for f in raw["files"]]
        return cls(**raw)


def read_manifest(path: Path | str) -> ExportManifest:
    manifest = Path(path) / MANIFEST
    try:
        return ExportManifest.from_json(manifest.read_bytes())
    except FileNotFoundError:
        raise ExportError(f"{path} holds no finished table export (no {MANIFEST})") from None


def _atomic_write(target: Path, write: Callable[[Path], None]) -> None:
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(temporary)
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def _describe(snapshot: TableSnapshot, columns: TableColumns) -> dict[str, Any]:
    table = snapshot.table
    return {
        "app": table.app_id,
        "table": table.name,
        "changelog_topic": table.changelog_topic.name,
        "source": snapshot.origin,
        "partitions": snapshot.partitions,
        "encoding": {
            "key_codec": columns.key_codec.name,
            "value_codec": columns.value_codec.name,
            "store_key": KEY_LAYOUT[table.key_layout],
        },
        "window": None if table.window is None else table.window.spec(),
    }


def write_snapshot(
    snapshot: TableSnapshot, path: Path | str, progress: Callable[[int, int], None] | None = None
) -> ExportManifest:
    """Write every partition of `snapshot` under `path` and return the manifest (also written there).
    `progress(rows written, rows expected)` is called after every batch."""
    with needs("pyarrow", "Parquet export"):
        import pyarrow.parquet as parquet
    target = Path(parse_target(path).location)
    target.mkdir(parents=True, exist_ok=True)
    columns = TableColumns(snapshot.table)
    views = dict(sorted(snapshot.views.items()))
    schema = columns.infer(list(views.values()))
    expected = sum(view.approximate_len() for view in views.values())
    done = 0
    lock = threading.Lock()

    def write_partition(number: int, view: StoreView) -> PartitionFile:
        offset = view.changelog_offset()  # a view is fixed, so this is the offset of every row read
        name = f"part-{number:05d}.parquet"
        rows = 0

        def write(temporary: Path) -> None:
            nonlocal rows, done
            with parquet.ParquetWriter(temporary, schema, use_dictionary=dictionary) as writer:
                for batch in columns.batches(view, ROW_GROUP):
                    writer.write_batch(batch)
                    rows += batch.num_rows
                    with lock:
                        done += batch.num_rows
                        if progress is not None:
                            progress(done, max(expected, done))

        _atomic_write(target / name, write)
        return PartitionFile(number, name, rows, offset)

    # Keys are unique: dictionary-encoding them costs time and saves nothing. Partitions are written by
    # two threads: Arrow's parsing and Parquet encoding release the GIL, so one partition's encoding
    # overlaps another's store scan.
    dictionary = [f.name for f in schema if f.name != KEY]
    with ThreadPoolExecutor(max_workers=WRITERS) as pool:
        files = list(pool.map(write_partition, views.keys(), views.values()))
    manifest = ExportManifest(
        **_describe(snapshot, columns),
        files=files,
        schema=[{"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in schema],
        created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        rows=sum(f.rows for f in files),
    )

    def write_manifest(temporary: Path) -> None:
        temporary.write_bytes(manifest.to_json())

    _atomic_write(target / MANIFEST, write_manifest)
    listed = {f.path for f in files}
    for stale in target.glob("part-*.parquet"):
        if stale.name not in listed:
            stale.unlink()
    if progress is not None:
        progress(done, done)
    return manifest
