"""Copy-on-write deletes: how a lake table loses rows in an export (engine.export.lake), for both formats.
The rows of a changed key (and of a partition copied in full) are replaced whole: every data file that holds
one of them is read again without them and replaced by what is left, and the new rows are added, in one
commit. A file that holds none is kept as it is; one whose key and partition ranges (its statistics) hold
none is not even read.

Files are read and written here with pyarrow, a row group at a time (memory stays bounded whatever the
table's size), REWRITERS at once; each format says how a file is opened, how a new one is written (Delta:
plain Parquet and an add action; Iceberg: pyiceberg's writer, field ids and a DataFile) and commits the
result. Why not a MERGE (delta-rs has one): it rewrites the same files, but joins every row of the table
with the changes and holds more of it in memory. Why not merge-on-read (deletion vectors, delete files):
neither delta-rs nor pyiceberg writes them.
"""

from __future__ import annotations

import bisect
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from engine.export.columns import KEY, PARTITION
from engine.export.optional import needs

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Sequence
    from contextlib import AbstractContextManager

    import pyarrow as pa

REWRITERS = 2  # files rewritten at once (reading and writing Parquet release the GIL)
# Rows per row group of a file written here: rows come in smaller batches (an export decodes CHUNK at a
# time, engine.export.columns; a rewritten file's row groups lose rows), gathered to this many. Bounds a
# writer's memory, and a rewrite's key lookups are per row group.
ROW_GROUP = 131_072
# A new file is closed once this much (in memory, uncompressed) is written to it; also a Delta table's
# delta.targetFileSize, for delta-rs' own writes (a full export).
FILE_BYTES = 64 * 1024 * 1024

Entry = TypeVar("Entry")  # a format's entry for a data file (Delta: an add action; Iceberg: a DataFile)


class NewFile(Protocol):
    """A data file being written by a format's writer."""

    schema: pa.Schema  # the file's (its rows are cast to it, field metadata included)

    def write(self, rows: pa.Table) -> None:
        """One row group (never empty)."""

    def close(self) -> Any | None:
        """The format's entry for the file; None if it got no row (then there is no file)."""

    def abort(self) -> None: ...


def removed_rows(rows: pa.Table | pa.RecordBatch, keys: pa.Array, partitions: pa.Array) -> pa.Array | None:
    """Which of `rows` go: those whose key is in `keys` or whose partition is in `partitions` (a boolean
    mask), or None when none does."""
    with needs("pyarrow", "lake export"):
        import pyarrow.compute as compute
    gone = compute.is_in(rows.column(KEY), value_set=keys)
    if len(partitions):
        gone = compute.or_(gone, compute.is_in(rows.column(PARTITION), value_set=partitions))
    return gone if compute.any(gone).as_py() else None


def may_hold(bounds: tuple[Any, Any, Any, Any], keys: Sequence[Any], partitions: Collection[int]) -> bool:
    """Whether a file whose statistics give `bounds` (lowest key, highest key, lowest partition, highest
    partition; None where unknown) may hold a row of `keys` (sorted) or of `partitions`."""
    low, high, first, last = bounds
    if low is None or high is None or first is None or last is None:
        return True
    if any(first <= number <= last for number in partitions):
        return True
    at = bisect.bisect_left(keys, low)
    return at < len(keys) and keys[at] <= high


class RowGroups:
    """A new file whose rows are cast to its schema and gathered into row groups of ROW_GROUP rows before
    they are written."""

    def __init__(self, file: NewFile) -> None:
        self.file = file
        self.bytes = 0  # written so far, in memory (uncompressed)
        self._gathered: list[pa.RecordBatch] = []
        self._rows = 0

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        with needs("pyarrow", "lake export"):
            import pyarrow as pa
        schema = self.file.schema
        if not rows.schema.equals(schema, check_metadata=True):  # (Iceberg's field ids are metadata)
            rows = rows.select(schema.names).cast(schema)
        self._gathered += rows.to_batches() if isinstance(rows, pa.Table) else [rows]
        self._rows += rows.num_rows
        self.bytes += rows.nbytes
        if self._rows >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            with needs("pyarrow", "lake export"):
                import pyarrow as pa
            self.file.write(pa.Table.from_batches(self._gathered, schema=self.file.schema))
        self._gathered, self._rows = [], 0

    def close(self) -> Any | None:
        self._flush()
        return self.file.close()

    def abort(self) -> None:
        self.file.abort()


class Rewrite:
    """The copy-on-write of one commit: the rows of `keys` (values of the key column, of `key_type`) and of
    `partitions` go; files are read through `open_file`, their `columns`, and new ones written with
    `new_file`. A row group whose statistics hold no such row is copied without a test; another is tested
    against only the keys in its range (a set lookup's cost is mostly building the set)."""

    def __init__(self, keys: list[Any], key_type: pa.DataType, partitions: Collection[int],
                 partition_type: pa.DataType, columns: list[str], new_file: Callable[[], NewFile]) -> None:
        with needs("pyarrow", "lake export"):
            import pyarrow as pa
        self.sorted, self.key_type = sorted(keys), key_type
        self.numbers = sorted(partitions)
        self.partitions = pa.array(self.numbers, partition_type)
        self.columns, self.new_file = columns, new_file
        with needs("pyarrow", "lake export"):
            import pyarrow.parquet as parquet
        self.parquet = parquet

    def holds(self, bounds: tuple[Any, Any, Any, Any]) -> bool:
        """Whether a file or row group with these statistics may hold a row to remove (`may_hold`)."""
        return may_hold(bounds, self.sorted, self.numbers)

    def files(self, held: Iterable[Entry], open_file: Callable[[Entry], AbstractContextManager[Any]]
              ) -> list[tuple[Entry, Any | None]]:
        """Each file of `held` that holds a row to remove, with the entry of the file that replaces it (None
        if no row is left)."""
        def one(entry: Entry) -> tuple[Entry, Any | None] | None:
            with open_file(entry) as source:
                return self._without(entry, self.parquet.ParquetFile(source))

        with ThreadPoolExecutor(REWRITERS, thread_name_prefix="lake-rewrite") as pool:
            return [done for done in pool.map(one, held) if done is not None]

    def _without(self, entry: Entry, reader: Any) -> tuple[Entry, Any | None] | None:
        """The file of `reader` written again without the rows to remove, a row group at a time; None when
        it holds none (it stays as it is)."""
        with needs("pyarrow", "lake export"):
            import pyarrow.compute as compute
        footer = Footer(reader.metadata)
        for first in range(reader.num_row_groups):  # the first row group with a row to remove
            if (found := self._gone(reader, footer, first)) is not None:
                break
        else:
            return None
        written = RowGroups(self.new_file())
        try:
            for group in range(first):
                written.write(self._read(reader, group))
            for group in range(first, reader.num_row_groups):
                if group > first:
                    found = self._gone(reader, footer, group)
                if found is not None:
                    rows, gone = found
                    written.write(rows.filter(compute.invert(gone)))
                else:
                    written.write(self._read(reader, group))
        except BaseException:
            written.abort()
            raise
        return entry, written.close()

    def _read(self, reader: Any, group: int) -> pa.Table:
        """(A column at a time: the rewriters are the parallelism.)"""
        return reader.read_row_group(group, columns=self.columns, use_threads=False)

    def _gone(self, reader: Any, footer: Footer, group: int) -> tuple[pa.Table, pa.Array] | None:
        """Row group `group`, read, and which of its rows go; None (and not read) if none does."""
        bounds = footer.bounds(group)
        if not self.holds(bounds):
            return None
        low, high = bounds[:2]
        keys = self.sorted if low is None or high is None else \
            self.sorted[bisect.bisect_left(self.sorted, low):bisect.bisect_right(self.sorted, high)]
        rows = self._read(reader, group)
        with needs("pyarrow", "lake export"):
            import pyarrow as pa
        gone = removed_rows(rows, pa.array(keys, self.key_type), self.partitions)
        return None if gone is None else (rows, gone)


class Footer:
    """The key's and the partition's statistics in a Parquet file's footer (what Delta's add actions and
    the rewrite's row groups are ruled out by)."""

    def __init__(self, metadata: Any) -> None:
        self.metadata = metadata
        paths = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        self.indexes = [paths.index(name) if name in paths else None for name in (KEY, PARTITION)]

    def _stats(self, group: int, index: int | None) -> Any | None:
        stats = None if index is None else self.metadata.row_group(group).column(index).statistics
        return stats if stats is not None and stats.has_min_max else None

    def bounds(self, group: int) -> tuple[Any, Any, Any, Any]:
        """Row group `group`'s (lowest key, highest key, lowest partition, highest partition), None where
        unknown."""
        key, partition = (self._stats(group, index) for index in self.indexes)
        low, high = (None, None) if key is None else (key.min, key.max)
        first, last = (None, None) if partition is None else (partition.min, partition.max)
        return low, high, first, last

    def ranges(self) -> list[tuple[Any, Any, int]]:
        """For the key and the partition, the whole file's (minimum, maximum, null count); None for the
        minimum and maximum if a row group has no statistics."""
        found = []
        for index in self.indexes:
            each = [self._stats(group, index) for group in range(self.metadata.num_row_groups)]
            known = [stats for stats in each if stats is not None]
            if not known or len(known) < len(each):
                found.append((None, None, 0))
            else:
                found.append((min(s.min for s in known), max(s.max for s in known),
                              sum(s.null_count for s in known)))
        return found


def write_files(batches: Iterable[pa.RecordBatch], new_file: Callable[[], NewFile]) -> list[Any]:
    """`batches` as new data files of about FILE_BYTES (in memory) each: their entries."""
    entries: list[Any] = []
    written: RowGroups | None = None
    try:
        for batch in batches:
            written = written or RowGroups(new_file())
            written.write(batch)
            if written.bytes >= FILE_BYTES:
                entries.append(written.close())
                written = None
    except BaseException:
        if written is not None:
            written.abort()
        raise
    if written is not None and (last := written.close()) is not None:
        entries.append(last)
    return entries
