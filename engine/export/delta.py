"""Delta Lake tables written with delta-rs (`deltalake`, no JVM): the one module that imports it.

A version is one Delta commit, so it is all or nothing: an export that dies before its commit leaves the
table at its previous version (files written meanwhile are unreferenced, and `VACUUM` removes them). The
LakeCommit (engine.export.lake) rides in the commit's `commitInfo` under the key `engine`, where Spark's
`DESCRIBE HISTORY`, delta-rs' `history()` and any Delta reader find it.

A full export is delta-rs' own overwrite. An incremental one replaces keys copy-on-write
(engine.export.rewrite): the files that hold their rows are written again here with pyarrow, and the
commit (the old files removed, the new ones added) is delta-rs' transaction, which also detects another
writer's commit of the same files in between.
"""

from __future__ import annotations

import bisect
import json
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from engine.export.columns import KEY, PARTITION, ExportError
from engine.export.lake import METADATA_KEY, LakeCommit, LakeConflict, version_of
from engine.export.optional import require
from engine.export.rewrite import removed_rows
from engine.export.targets import is_uri

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator

    import pyarrow as pa

# Row groups of this many rows, files of about this size: a writer holds one row group per open file, so
# these bound an export's memory (delta-rs' defaults buffer a million rows).
ROW_GROUP = 131_072
FILE_BYTES = 64 * 1024 * 1024  # also the table's delta.targetFileSize (delta-rs: 100 MB)
COMMIT_RETRIES = 20  # a commit that raced another writer's (two workers exporting) is retried on the new one
REWRITERS = 2  # files rewritten at once (reading and writing Parquet release the GIL)


def _deltalake() -> Any:
    return require("deltalake", "Delta Lake export")


def _properties(commit: LakeCommit) -> Any:
    return _deltalake().CommitProperties(custom_metadata={METADATA_KEY: commit.to_json()},
                                         max_commit_retries=COMMIT_RETRIES)


def _writer() -> Any:
    return _deltalake().WriterProperties(max_row_group_size=ROW_GROUP)


class DeltaTarget:
    """The Delta table at one location, created on first write: a directory here, or an object store's URI
    (delta-rs and pyarrow both take the store's credentials, region and endpoint from the environment:
    AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL...)."""

    def __init__(self, location: str) -> None:
        self.location = location

    def _exists(self) -> bool:
        return bool(_deltalake().DeltaTable.is_deltatable(self.location))

    def file_system(self) -> tuple[Any, str]:
        """The pyarrow file system of the table's location, and the location as that file system takes it
        (for files kept beside the table: an export round's stages)."""
        location = self.location if is_uri(self.location) else os.path.abspath(self.location)
        found, path = require("pyarrow.fs", "Delta Lake export").FileSystem.from_uri(location)
        return found, str(path).rstrip("/")

    def history(self) -> list[tuple[int, LakeCommit]]:
        """The engine commits of the table, newest first, with their versions; [] if there is none."""
        if not self._exists():
            return []
        found = []
        for entry in _deltalake().DeltaTable(self.location).history():
            text = entry.get(METADATA_KEY)
            commit = LakeCommit.from_json(text) if isinstance(text, str) else None
            if commit is not None:
                found.append((int(entry["version"]), commit))
        return found

    def overwrite(self, schema: pa.Schema, batches: Iterator[pa.RecordBatch],
                  partitions: Collection[int] | None, commit: LakeCommit) -> int:
        """Replace the rows of `partitions` (None: the whole table, its schema too) by `batches`, streamed
        (never all in memory) in one commit; returns the new version."""
        deltalake, pa = _deltalake(), require("pyarrow", "Delta Lake export")
        reader = pa.RecordBatchReader.from_batches(schema, batches)
        predicate = None
        if partitions is not None and self._exists():
            numbers = ", ".join(str(n) for n in sorted(partitions))
            predicate = f"{PARTITION} IN ({numbers})" if partitions else "false"
        try:
            deltalake.write_deltalake(self.location, reader, mode="overwrite", predicate=predicate,
                                      schema_mode="overwrite" if predicate is None else None,
                                      commit_properties=_properties(commit), target_file_size=FILE_BYTES,
                                      writer_properties=_writer(),
                                      configuration={"delta.targetFileSize": str(FILE_BYTES)})
        except deltalake.exceptions.CommitFailedError as exc:
            raise LakeConflict(str(exc)) from exc
        except deltalake.exceptions.SchemaMismatchError as exc:
            raise ExportError(f"{self.location}: the table's rows no longer fit the Delta table's schema "
                              f"({exc}); export all partitions at once to replace it, or to a new "
                              "path") from exc
        return version_of(self.history(), commit, self.location)

    def replace_keys(self, schema: pa.Schema, keys: list[Any], batches: Iterator[pa.RecordBatch],
                     commit: LakeCommit, partitions: Collection[int] = ()) -> int:
        """Delete every row of `keys` (values of the key column) and of `partitions`, and add `batches`, in
        one commit (engine.export.rewrite); returns the new version."""
        deltalake, pa = _deltalake(), require("pyarrow", "Delta Lake export")
        table = deltalake.DeltaTable(self.location)
        _require_plain_files(table, self.location)
        fs, root = self.file_system()
        files = Files(fs, root, pa.schema(table.schema().to_arrow()))  # as delta-rs wrote them
        gone = pa.array(keys, schema.field(KEY).type)
        numbers = pa.array(sorted(partitions), schema.field(PARTITION).type)
        held = [found for found in pa.table(table.get_add_actions(flatten=True)).to_pylist()
                if _may_hold(found, sorted(keys), set(partitions))]
        with ThreadPoolExecutor(REWRITERS, thread_name_prefix="delta-rewrite") as pool:
            rewritten = [done for done in pool.map(lambda found: files.without(found, gone, numbers), held)
                         if done is not None]
        now = int(time.time() * 1000)
        remove = require("deltalake.transaction", "Delta Lake export").RemoveAction
        actions: list[Any] = [remove(found["path"], True, now, found["size_bytes"], {})
                              for found, _ in rewritten]
        actions += [add for _, add in rewritten if add is not None]
        actions += files.write(batches)
        try:
            table.create_write_transaction(actions, "append", table.schema(),
                                           commit_properties=_properties(commit))
        except deltalake.exceptions.CommitFailedError as exc:
            raise LakeConflict(str(exc)) from exc
        return version_of(self.history(), commit, self.location)


def _require_plain_files(table: Any, location: str) -> None:
    """Files are rewritten here only as engine writes them: rows in plain Parquet files, columns by name."""
    protocol, metadata = table.protocol(), table.metadata()
    features = set(protocol.reader_features or ()) | set(protocol.writer_features or ())
    mapping = metadata.configuration.get("delta.columnMapping.mode", "none")
    if "deletionVectors" in features or mapping != "none" or metadata.partition_columns:
        raise ExportError(f"{location}: another writer gave the Delta table deletion vectors, column "
                          "mapping or partition columns, which an incremental export cannot rewrite; export "
                          "in full to a new path")


def _may_hold(found: dict[str, Any], keys: list[Any], partitions: set[int]) -> bool:
    """Whether a data file (an add action, its statistics flattened) may hold a row of `keys` (sorted) or of
    `partitions`: one whose key and partition ranges hold none is kept without being read."""
    low, high = found.get(f"min.{KEY}"), found.get(f"max.{KEY}")
    first, last = found.get(f"min.{PARTITION}"), found.get(f"max.{PARTITION}")
    if low is None or high is None or first is None or last is None:
        return True
    if any(first <= number <= last for number in partitions):
        return True
    at = bisect.bisect_left(keys, low)
    return at < len(keys) and keys[at] <= high


class Files:
    """Data files of one Delta table read and written with pyarrow, in the table's Arrow schema (`schema`:
    what delta-rs makes of engine's columns, its timestamps in microseconds, so every file has the same
    types), each with the add action that names it."""

    def __init__(self, fs: Any, root: str, schema: pa.Schema) -> None:
        self.fs, self.root, self.schema = fs, root, schema
        self.parquet = require("pyarrow.parquet", "Delta Lake export")

    def without(self, found: dict[str, Any], keys: pa.Array, partitions: pa.Array
                ) -> tuple[dict[str, Any], Any | None] | None:
        """The data file `found` (an add action) written again without the rows of `keys` and `partitions`,
        a row group at a time: (its action, the new file's add action, None if no row is left); None when
        it holds none of them (it stays as it is)."""
        compute = require("pyarrow.compute", "Delta Lake export")
        path = found["path"]
        with self.fs.open_input_file(path if is_uri(path) else f"{self.root}/{unquote(path)}") as source:
            reader = self.parquet.ParquetFile(source)
            for first in range(reader.num_row_groups):  # the first row group with a row to remove
                rows = reader.read_row_group(first)
                if (gone := removed_rows(rows, keys, partitions)) is not None:
                    break
            else:
                return None
            writer = _Writer(self)
            try:
                for group in range(first):
                    writer.write(reader.read_row_group(group))
                writer.write(rows.filter(compute.invert(gone)))
                for group in range(first + 1, reader.num_row_groups):
                    rows = reader.read_row_group(group)
                    gone = removed_rows(rows, keys, partitions)
                    writer.write(rows if gone is None else rows.filter(compute.invert(gone)))
            except BaseException:
                writer.abort()
                raise
        return found, writer.close()

    def write(self, batches: Iterable[pa.RecordBatch]) -> list[Any]:
        """`batches` as new data files of about FILE_BYTES (in memory, uncompressed) each: their add
        actions."""
        added: list[Any] = []
        writer: _Writer | None = None
        try:
            for batch in batches:
                writer = writer or _Writer(self)
                writer.write(batch)
                if writer.bytes >= FILE_BYTES:
                    added.append(writer.close())
                    writer = None
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if writer is not None and (last := writer.close()) is not None:
            added.append(last)
        return added


class _Writer:
    """One new data file: rows written to it (cast to the table's schema), then, once closed, its add action
    with the statistics Delta readers (and `_may_hold`) skip files by: row count, the key's and the
    partition's ranges and null counts."""

    def __init__(self, files: Files) -> None:
        self.files = files
        self.name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        self.path = f"{files.root}/{self.name}"
        self.rows = self.bytes = 0
        self._sink = files.fs.open_output_stream(self.path)
        self._parquet = files.parquet.ParquetWriter(self._sink, files.schema, compression="snappy")

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        if rows.num_rows:
            if rows.schema != self.files.schema:
                rows = rows.select(self.files.schema.names).cast(self.files.schema)
            self._parquet.write(rows, row_group_size=ROW_GROUP)
            self.rows += rows.num_rows
            self.bytes += rows.nbytes

    def close(self) -> Any | None:
        """The file's add action; None for a file that got no row (it is deleted)."""
        self._parquet.close()
        size = self._sink.tell()
        self._sink.close()  # (on an object store, the upload completes here)
        if not self.rows:
            self.files.fs.delete_file(self.path)
            return None
        stats = _statistics(self._parquet.writer.metadata, self.files.schema.names)
        transaction = require("deltalake.transaction", "Delta Lake export")
        return transaction.AddAction(self.name, size, {}, int(time.time() * 1000), True, stats)

    def abort(self) -> None:
        self._parquet.close()
        self._sink.close()
        self.files.fs.delete_file(self.path)


def _statistics(metadata: Any, names: list[str]) -> str:
    """A file's Delta statistics (JSON) from its Parquet footer: the row count, and the key's and the
    partition's minimum, maximum and null count (columns whose values JSON has as they are)."""
    found: dict[str, Any] = {"numRecords": metadata.num_rows, "minValues": {}, "maxValues": {},
                             "nullCount": {}}
    for name in (KEY, PARTITION):
        column = names.index(name)
        low = high = None
        nulls = 0
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(column).statistics
            if stats is None or not stats.has_min_max or not isinstance(stats.min, (int, str)):
                break
            low = stats.min if low is None else min(low, stats.min)
            high = stats.max if high is None else max(high, stats.max)
            nulls += stats.null_count
        else:
            if low is not None:
                found["minValues"][name], found["maxValues"][name] = low, high
                found["nullCount"][name] = nulls
    return json.dumps(found)
