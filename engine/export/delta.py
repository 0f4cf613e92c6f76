"""Delta Lake tables written with delta-rs (`deltalake`, no JVM): the one module that imports it.

A version is one Delta commit, so it is all or nothing: an export that dies before its commit leaves the
table at its previous version (files written meanwhile are unreferenced, and `VACUUM` removes them). The
LakeCommit (engine.export.lake) rides in the commit's `commitInfo` under the key `engine`, where Spark's
`DESCRIBE HISTORY`, delta-rs' `history()` and any Delta reader find it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from engine.export.columns import PARTITION, ExportError
from engine.export.lake import METADATA_KEY, LakeCommit, LakeConflict, version_of
from engine.export.optional import require
from engine.export.targets import is_uri

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator

    import pyarrow as pa

DELETED = "_engine_deleted"  # a MERGE source column: this row's key is gone from the table
# Row groups of this many rows, files of about this size: the writer holds one row group per open file, so
# these bound an export's memory (delta-rs' defaults buffer a million rows).
ROW_GROUP = 131_072
FILE_BYTES = 64 * 1024 * 1024  # also the table's delta.targetFileSize: a MERGE's files (delta-rs: 100 MB)
COMMIT_RETRIES = 20  # a commit that raced another writer's (two workers exporting) is retried on the new one


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

    def merge(self, schema: pa.Schema, batches: Iterator[pa.RecordBatch], keys: list[str],
              commit: LakeCommit, replace: Collection[int] = ()) -> int:
        """One MERGE of `batches` (the table's columns plus DELETED) into the table, matched on `keys`: rows
        flagged DELETED are deleted, the others inserted or updated; of partitions `replace` (copied in
        full), every row `batches` does not have is deleted too. Returns the new version."""
        deltalake, pa = _deltalake(), require("pyarrow", "Delta Lake export")
        source = pa.RecordBatchReader.from_batches(schema, batches)
        matched = " AND ".join(f"t.`{name}` = s.`{name}`" for name in keys)
        values = {f"`{f.name}`": f"s.`{f.name}`" for f in schema if f.name != DELETED}
        table = deltalake.DeltaTable(self.location)
        try:
            merger = (table.merge(source, matched, source_alias="s", target_alias="t",
                                  commit_properties=_properties(commit), writer_properties=_writer())
                      .when_matched_delete(f"s.{DELETED}")
                      .when_matched_update(values, f"NOT s.{DELETED}")
                      .when_not_matched_insert(values, f"NOT s.{DELETED}"))
            if replace:
                numbers = ", ".join(str(n) for n in sorted(replace))
                merger = merger.when_not_matched_by_source_delete(f"t.{PARTITION} IN ({numbers})")
            merger.execute()
        except deltalake.exceptions.CommitFailedError as exc:
            raise LakeConflict(str(exc)) from exc
        return version_of(self.history(), commit, self.location)
