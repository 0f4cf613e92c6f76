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

import json
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from engine.errors import ExportError, LakeConflict
from engine.export.columns import KEY, PARTITION
from engine.export.lake import METADATA_KEY, LakeCommit, version_of
from engine.export.optional import needs
from engine.export.rewrite import FILE_BYTES, ROW_GROUP, Footer, Rewrite, write_files
from engine.targets import DELTA, Target, is_uri

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator

    import pyarrow as pa

COMMIT_RETRIES = 20  # a commit that raced another writer's (two workers exporting) is retried on the new one


def _deltalake() -> Any:
    """deltalake, imported on the first use of a Delta table (only an export to one needs it)."""
    with needs("deltalake", "Delta Lake export"):
        import deltalake
        import deltalake.transaction
    return deltalake


def _properties(commit: LakeCommit) -> Any:
    return _deltalake().CommitProperties(custom_metadata={METADATA_KEY: commit.to_json()},
                                         max_commit_retries=COMMIT_RETRIES)


def _writer() -> Any:
    # (delta-rs' writer holds a row group per open file: its default, a million rows, would be most of an
    # export's memory)
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
        location = Target(DELTA, self.location).absolute().location
        with needs("pyarrow", "Delta Lake export"):
            import pyarrow.fs as fs_module
        found, path = fs_module.FileSystem.from_uri(location)
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
        with needs("pyarrow", "Delta Lake export"):
            import pyarrow as pa
        deltalake = _deltalake()
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
        with needs("pyarrow", "Delta Lake export"):
            import pyarrow as pa
        deltalake = _deltalake()
        table = deltalake.DeltaTable(self.location)
        _require_plain_files(table, self.location)
        fs, root = self.file_system()
        file_schema = pa.schema(table.schema().to_arrow())  # as delta-rs writes engine's columns

        def new_file() -> _DeltaFile:
            return _DeltaFile(fs, root, file_schema)

        def open_file(found: dict[str, Any]) -> Any:
            path = found["path"]
            return fs.open_input_file(path if is_uri(path) else f"{root}/{unquote(path)}")

        rewrite = Rewrite(keys, schema.field(KEY).type, partitions, schema.field(PARTITION).type,
                          file_schema.names, new_file)
        held = [found for found in pa.table(table.get_add_actions(flatten=True)).to_pylist()
                if rewrite.holds(_bounds(found))]
        rewritten = rewrite.files(held, open_file)
        now = int(time.time() * 1000)
        remove = deltalake.transaction.RemoveAction
        actions: list[Any] = [remove(found["path"], True, now, found["size_bytes"], {})
                              for found, _ in rewritten]
        actions += [add for _, add in rewritten if add is not None]
        actions += write_files(batches, new_file)
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


def _bounds(found: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """A data file's key and partition ranges, from its add action's statistics (flattened)."""
    return (found.get(f"min.{KEY}"), found.get(f"max.{KEY}"), found.get(f"min.{PARTITION}"),
            found.get(f"max.{PARTITION}"))


class _DeltaFile:
    """One new data file, plain Parquet in the table's Arrow schema (`schema`: what delta-rs makes of engine's
    columns, its timestamps in microseconds, so every file has the same types); once closed, its add action
    with the statistics Delta readers (and engine.export.rewrite) skip files by: row count, the key's and the
    partition's ranges and null counts."""

    def __init__(self, fs: Any, root: str, schema: pa.Schema) -> None:
        self.fs, self.schema = fs, schema
        self.name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        self.path = f"{root}/{self.name}"
        self.rows = 0
        self._sink = fs.open_output_stream(self.path)
        with needs("pyarrow", "Delta Lake export"):
            import pyarrow.parquet as parquet
        self._parquet = parquet.ParquetWriter(self._sink, schema, compression="snappy")

    def write(self, rows: pa.Table) -> None:
        self._parquet.write(rows)
        self.rows += rows.num_rows

    def close(self) -> Any | None:
        self._parquet.close()
        size = self._sink.tell()
        self._sink.close()  # (on an object store, the upload completes here)
        if not self.rows:
            self.fs.delete_file(self.path)
            return None
        stats = _statistics(self._parquet.writer.metadata)
        transaction = _deltalake().transaction
        return transaction.AddAction(self.name, size, {}, int(time.time() * 1000), True, stats)

    def abort(self) -> None:
        self._parquet.close()
        self._sink.close()
        self.fs.delete_file(self.path)


def _statistics(metadata: Any) -> str:
    """A file's Delta statistics (JSON) from its Parquet footer: the row count, and the key's and the
    partition's minimum, maximum and null count (where the footer has them, as JSON has them)."""
    found: dict[str, Any] = {"numRecords": metadata.num_rows, "minValues": {}, "maxValues": {},
                             "nullCount": {}}
    for name, (low, high, nulls) in zip((KEY, PARTITION), Footer(metadata).ranges(), strict=True):
        if isinstance(low, (int, str)) and isinstance(high, (int, str)):
            found["minValues"][name], found["maxValues"][name], found["nullCount"][name] = low, high, nulls
    return json.dumps(found)
