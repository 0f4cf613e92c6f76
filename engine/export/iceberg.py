"""Apache Iceberg tables written with pyiceberg: the one module that imports it.

A target is `iceberg:[CATALOG.]NAMESPACE.TABLE`. CATALOG is a pyiceberg catalog configured the usual way
(`~/.pyiceberg.yaml`, or `PYICEBERG_CATALOG__<NAME>__URI=...`: REST, Glue, Hive, SQL...); without one, or
named `engine` and not configured, it is a SQL catalog in SQLite under the worker's data dir
(`<data dir>/iceberg/`), its files beside it.

Each export is one catalog commit. A full export overwrites; an incremental one deletes the rows of the keys
written since and appends their rows as of the snapshot (a windowed table's key with all its windows:
engine.export.rewrite). The commit's last snapshot carries the LakeCommit (engine.export.lake) in
its summary under `engine`; that snapshot is the version an export reports (the snapshots before it in the
same commit, a delete and appends of earlier rows, carry none).
"""

from __future__ import annotations

import itertools
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from engine.export.columns import KEY, PARTITION, ExportError
from engine.export.lake import METADATA_KEY, LakeCommit, LakeConflict, version_of
from engine.export.optional import require
from engine.export.rewrite import removed_rows

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator

    import pyarrow as pa

    from engine.settings import Settings

DEFAULT_CATALOG = "engine"
APPEND_ROWS = 500_000


def identifier(location: str) -> tuple[str, str]:
    """(catalog name, "namespace.table") of a target's location."""
    parts = location.split(".")
    if len(parts) < 2 or not all(parts):
        raise ExportError(f"iceberg:{location} needs a namespace and a table, as in iceberg:analytics.counts "
                          "(or iceberg:CATALOG.NAMESPACE.TABLE)")
    if len(parts) == 2:
        return DEFAULT_CATALOG, location
    return parts[0], ".".join(parts[1:])


def _catalog(name: str, settings: Settings) -> tuple[Any, bool]:
    """The catalog `name`, and whether it is the default one in the worker's data dir."""
    catalog = require("pyiceberg.catalog", "Iceberg export")
    try:
        return catalog.load_catalog(name), False
    except ValueError:  # not configured
        if name != DEFAULT_CATALOG:
            raise ExportError(f"no Iceberg catalog {name!r} is configured (~/.pyiceberg.yaml or "
                              f"PYICEBERG_CATALOG__{name.upper()}__URI)") from None
    sql = require("pyiceberg.catalog.sql", "Iceberg export")
    root = Path(settings.data_dir).resolve() / "iceberg"
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return sql.SqlCatalog(DEFAULT_CATALOG, uri=f"sqlite:///{root / 'catalog.db'}",
                          warehouse=(root / "warehouse").as_uri()), True


def _chunks(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[list[pa.RecordBatch]]:
    """`batches` gathered into lists of about `rows` rows."""
    chunk: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        chunk.append(batch)
        size += batch.num_rows
        if size >= rows:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


class IcebergTarget:
    """One Iceberg table, created on first write."""

    def __init__(self, location: str, settings: Settings) -> None:
        self.location = location
        catalog_name, self.name = identifier(location)
        # in_data_dir: the default catalog, in this worker's data dir, which no other worker sees
        self.catalog, self.in_data_dir = _catalog(catalog_name, settings)

    def _table(self) -> Any | None:
        exceptions = require("pyiceberg.exceptions", "Iceberg export")
        try:
            return self.catalog.load_table(self.name)
        except exceptions.NoSuchTableError:
            return None

    def history(self) -> list[tuple[int, LakeCommit]]:
        """The engine commits of the table, newest first, with their snapshot ids; [] if there is none."""
        table = self._table()
        if table is None:
            return []
        found = []
        for snapshot in sorted(table.snapshots(), key=lambda s: s.sequence_number, reverse=True):
            text = snapshot.summary.additional_properties.get(METADATA_KEY) if snapshot.summary else None
            commit = LakeCommit.from_json(text) if isinstance(text, str) else None
            if commit is not None:
                found.append((int(snapshot.snapshot_id), commit))
        return found

    def _create(self, schema: pa.Schema) -> Any:
        namespace = self.name.rsplit(".", 1)[0]
        self.catalog.create_namespace_if_not_exists(namespace)
        return self.catalog.create_table_if_not_exists(self.name, schema=schema)

    def overwrite(self, schema: pa.Schema, batches: Iterator[pa.RecordBatch],
                  partitions: Collection[int] | None, commit: LakeCommit) -> int:
        """Replace the rows of `partitions` (None: all) by `batches`, streamed, in one commit."""
        table = self._table() or self._create(schema)
        return self._commit(table, [], None if partitions is None else sorted(partitions), schema, batches,
                            commit)

    def replace_keys(self, schema: pa.Schema, keys: list[Any], batches: Iterator[pa.RecordBatch],
                     commit: LakeCommit, partitions: Collection[int] = ()) -> int:
        """Delete every row of `keys` (values of the key column) and of `partitions`, and append `batches`,
        in one commit."""
        table = self._table()
        if table is None:
            raise ExportError(f"iceberg:{self.location} does not exist; an incremental export needs it")
        return self._commit(table, keys, sorted(partitions), schema, batches, commit)

    def file_system(self, schema: pa.Schema) -> tuple[Any, str] | None:
        """The pyarrow file system of the table's files (created, empty, if the table does not exist) and
        its location as that file system takes it: this machine's, or an object store's configured as the
        catalog configures it (its credentials, endpoint, region). None if the table's file IO is not
        pyarrow's (pyiceberg's fsspec one)."""
        table = self._table() or self._create(schema)
        location = urlparse(table.location())
        if location.scheme in ("", "file"):
            fs = require("pyarrow.fs", "Iceberg export")
            return fs.LocalFileSystem(), location.path
        by_scheme = getattr(table.io, "fs_by_scheme", None)  # pyiceberg's PyArrowFileIO
        if by_scheme is None:
            return None
        return by_scheme(location.scheme, location.netloc), f"{location.netloc}{location.path}".rstrip("/")

    def _commit(self, table: Any, keys: list[Any], partitions: list[int] | None, schema: pa.Schema,
                batches: Iterator[pa.RecordBatch], commit: LakeCommit) -> int:
        """Delete the rows of `keys` (values of the key column) and of `partitions` (None: every row), then
        append `batches`, as one catalog commit whose last snapshot carries `commit`. The rows are appended
        APPEND_ROWS at a time (an append gathers its rows before it writes them; given a stream, pyiceberg
        still reads all of it ahead of its writers): memory stays bounded, and the snapshots before the last
        carry no metadata, so no version is reported half-appended."""
        pa = require("pyarrow", "Iceberg export")
        exceptions = require("pyiceberg.exceptions", "Iceberg export")
        expressions = require("pyiceberg.expressions", "Iceberg export")
        metadata = {METADATA_KEY: commit.to_json()}
        rewritten: list[Any] = []  # data files read again without the rows deleted
        try:
            with table.transaction() as transaction, warnings.catch_warnings():
                if partitions is None:  # every data file dropped whole
                    # (pyiceberg warns of a delete that matched nothing: a new table's)
                    warnings.filterwarnings("ignore", "Delete operation did not match any records")
                    transaction.delete(expressions.AlwaysTrue())
                elif keys or partitions:
                    kept = _without(table, pa.array(keys, schema.field(KEY).type),
                                    pa.array(partitions, schema.field(PARTITION).type), schema, rewritten)
                    batches = itertools.chain(kept, batches)
                last: list[Any] = []  # record batches
                for chunk in _chunks(batches, APPEND_ROWS):  # each appended once the next one is read
                    if last:
                        transaction.append(pa.Table.from_batches(last, schema=schema))
                    last = chunk
                transaction.append(pa.Table.from_batches(last, schema=schema),
                                   snapshot_properties={} if rewritten else metadata)
                if rewritten:
                    with transaction.update_snapshot(snapshot_properties=metadata).overwrite() as overwrite:
                        for data_file in rewritten:
                            overwrite.delete_data_file(data_file)
        except exceptions.CommitFailedException as exc:
            raise LakeConflict(str(exc)) from exc
        return version_of(self.history(), commit, f"iceberg:{self.location}")


def _without(table: Any, keys: pa.Array, partitions: pa.Array, schema: pa.Schema,
             rewritten: list[Any]) -> Iterator[pa.RecordBatch]:
    """The rows of each data file of `table` that holds a row of `keys` or of `partitions`, without those
    rows; each such file is added to `rewritten` once read (for the commit to remove it). A copy-on-write
    delete (engine.export.rewrite), done here and not by pyiceberg's `delete(In(key, keys))`, which binds
    its filter's literals one at a time, several times over (most of an incremental export's time for many
    keys): here a row's test is one lookup in an Arrow set."""
    compute = require("pyarrow.compute", "Iceberg export")
    arrow_io = require("pyiceberg.io.pyarrow", "Iceberg export")
    scan = arrow_io.ArrowScan(table_metadata=table.metadata, io=table.io, projected_schema=table.schema(),
                              row_filter=require("pyiceberg.expressions", "Iceberg export").AlwaysTrue())
    for task in table.scan().plan_files():
        # One file at a time (given several, pyiceberg reads them all at once), tested in one call: each
        # call builds the set of `keys` anew.
        rows = scan.to_table([task])
        deleted = removed_rows(rows, keys, partitions)
        if deleted is not None:
            rewritten.append(task.file)
            yield from rows.filter(compute.invert(deleted)).select(schema.names).cast(schema).to_batches()
