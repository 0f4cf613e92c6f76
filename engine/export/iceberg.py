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

import contextlib
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from engine.errors import ExportError, LakeConflict
from engine.export.columns import KEY, PARTITION
from engine.export.lake import METADATA_KEY, LakeCommit, version_of
from engine.export.optional import needs
from engine.export.rewrite import Rewrite, write_files

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator

    import pyarrow as pa

    from engine.settings import Settings

DEFAULT_CATALOG = "engine"
CREATE_ATTEMPTS = 5  # a catalog's or a table's creation, raced by another worker's
T = TypeVar("T")


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
    with needs("pyiceberg", "Iceberg export"):
        from pyiceberg import catalog
    try:  # (a SQL catalog creates its own tables at its first load: workers race there too)
        return _despite_races(f"Iceberg catalog {name!r}", lambda: catalog.load_catalog(name),
                              lambda: None), False
    except ValueError:  # not configured
        if name != DEFAULT_CATALOG:
            raise ExportError(f"no Iceberg catalog {name!r} is configured (~/.pyiceberg.yaml or "
                              f"PYICEBERG_CATALOG__{name.upper()}__URI)") from None
    with needs("pyiceberg", "Iceberg export"):
        from pyiceberg.catalog import sql
    root = Path(settings.data_dir).resolve() / "iceberg"
    (root / "warehouse").mkdir(parents=True, exist_ok=True)
    return sql.SqlCatalog(DEFAULT_CATALOG, uri=f"sqlite:///{root / 'catalog.db'}",
                          warehouse=(root / "warehouse").as_uri()), True


def _despite_races(what: str, attempt: Callable[[], T], already: Callable[[], T | None]) -> T:
    """`attempt()`, which creates what every worker of an app creates at the same time (their first round:
    a SQL catalog's own tables, a namespace, a table). A catalog may fail the one that lost the race with
    an error of its own (SQLite's "already exists" or unique constraint, a locked database): what `already`
    finds then is as good, or the attempt is made again. An ExportError saying why after CREATE_ATTEMPTS;
    ValueError (pyiceberg's "not configured") is not retried."""
    for number in range(1, CREATE_ATTEMPTS + 1):
        try:
            return attempt()
        except ValueError:
            raise
        except Exception as exc:  # (whatever this catalog raises)
            found = already()
            if found is not None:
                return found
            if number == CREATE_ATTEMPTS:
                raise ExportError(f"{what} could not be created: {type(exc).__name__}: {exc}") from exc
            time.sleep(0.1 * number)
    raise AssertionError("unreachable")


class IcebergTarget:
    """One Iceberg table, created on first write."""

    def __init__(self, location: str, settings: Settings) -> None:
        self.location = location
        catalog_name, self.name = identifier(location)
        # in_data_dir: the default catalog, in this worker's data dir, which no other worker sees
        self.catalog, self.in_data_dir = _catalog(catalog_name, settings)

    def _table(self) -> Any | None:
        with needs("pyiceberg", "Iceberg export"):
            from pyiceberg import exceptions
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
        """The table, created with `schema` (and its namespace) unless it exists."""
        namespace = self.name.rsplit(".", 1)[0]

        def create() -> Any:
            self.catalog.create_namespace_if_not_exists(namespace)
            return self.catalog.create_table_if_not_exists(self.name, schema=schema)

        return _despite_races(f"iceberg:{self.location}: the table", create, self._table)

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
            with needs("pyarrow", "Iceberg export"):
                import pyarrow.fs as fs
            return fs.LocalFileSystem(), location.path
        by_scheme = getattr(table.io, "fs_by_scheme", None)  # pyiceberg's PyArrowFileIO
        if by_scheme is None:
            return None
        return by_scheme(location.scheme, location.netloc), f"{location.netloc}{location.path}".rstrip("/")

    def _commit(self, table: Any, keys: list[Any], partitions: list[int] | None, schema: pa.Schema,
                batches: Iterator[pa.RecordBatch], commit: LakeCommit) -> int:
        """Delete the rows of `keys` (values of the key column) and of `partitions` (None: every row), then
        add `batches`, as one snapshot (one catalog commit) that carries `commit`. The files are written as
        the rows come (engine.export.rewrite): memory stays bounded, and the table's history has no
        snapshot of half an export."""
        with needs("pyiceberg", "Iceberg export"):
            from pyiceberg import exceptions
        tasks = list(table.scan().plan_files()) if table.current_snapshot() is not None else []
        if any(task.delete_files for task in tasks):
            raise ExportError(f"iceberg:{self.location}: another writer gave the table delete files "
                              "(merge-on-read), which an export cannot rewrite; export to a new table")
        files = _Files(table)
        if partitions is None:  # every data file dropped whole
            rewritten: list[tuple[Any, Any | None]] = [(task.file, None) for task in tasks]
        else:
            rewrite = Rewrite(keys, schema.field(KEY).type, partitions, schema.field(PARTITION).type,
                              files.schema.names, files.new_file)
            held = [task.file for task in tasks if rewrite.holds(files.bounds(task.file))]
            rewritten = rewrite.files(held, files.open)
        added = [new for _, new in rewritten if new is not None] + write_files(batches, files.new_file)
        try:
            with table.transaction() as transaction:
                update = transaction.update_snapshot(snapshot_properties={METADATA_KEY: commit.to_json()})
                with update.overwrite() if rewritten else update.fast_append() as snapshot:
                    for old, _ in rewritten:
                        snapshot.delete_data_file(old)
                    for new in added:
                        snapshot.append_data_file(new)
        except exceptions.CommitFailedException as exc:
            raise LakeConflict(str(exc)) from exc
        return version_of(self.history(), commit, f"iceberg:{self.location}")


class _Files:
    """The data files of one Iceberg table, read and written through its own file IO (this machine's, an
    object store's: whatever the catalog configures), in its schema with its field ids."""

    def __init__(self, table: Any) -> None:
        self.table = table
        with needs("pyiceberg", "Iceberg export"):
            from pyiceberg.io import pyarrow as arrow_io
            from pyiceberg.table import locations
        self.schema = arrow_io.schema_to_pyarrow(table.schema(), include_field_ids=True)
        self.locations = locations.load_location_provider(table.location(), table.properties)
        fields = table.schema()
        self.bounded = [(fields.find_field(name).field_id, fields.find_field(name).field_type)
                        for name in (KEY, PARTITION)]

    def open(self, data_file: Any) -> Any:
        return self.table.io.new_input(data_file.file_path).open()

    def new_file(self) -> _IcebergFile:
        path = self.locations.new_data_location(f"00000-0-{uuid.uuid4()}.parquet")
        return _IcebergFile(self, path)

    def bounds(self, data_file: Any) -> tuple[Any, Any, Any, Any]:
        """A data file's key and partition ranges, from its statistics (None where it has none)."""
        with needs("pyiceberg", "Iceberg export"):
            from pyiceberg import conversions
        lows, highs = data_file.lower_bounds or {}, data_file.upper_bounds or {}
        (key, key_type), (partition, partition_type) = self.bounded

        def bound(found: dict[int, bytes], field: int, type_: Any) -> Any:
            raw = found.get(field)
            return None if raw is None else conversions.from_bytes(type_, raw)

        return (bound(lows, key, key_type), bound(highs, key, key_type),
                bound(lows, partition, partition_type), bound(highs, partition, partition_type))


class _IcebergFile:
    """One new data file, written by pyiceberg's Parquet writer (its compression, statistics and field
    ids); once closed, its DataFile."""

    def __init__(self, files: _Files, path: str) -> None:
        self.files, self.path, self.schema = files, path, files.schema
        self.rows = 0
        with needs("pyiceberg", "Iceberg export"):
            from pyiceberg import manifest
            from pyiceberg.io import fileformat
        self._writer = fileformat.FileFormatFactory.get(manifest.FileFormat.PARQUET).create_writer(
            files.table.io.new_output(path), files.table.schema(), files.table.properties)

    def write(self, rows: pa.Table) -> None:
        self._writer.write(rows)
        self.rows += rows.num_rows

    def close(self) -> Any | None:
        if not self.rows:  # (pyiceberg's writer creates its file at the first write)
            return None
        statistics = self._writer.close()
        with needs("pyiceberg", "Iceberg export"):
            from pyiceberg import manifest, typedef
        table = self.files.table
        return manifest.DataFile.from_args(
            content=manifest.DataFileContent.DATA, file_path=self.path,
            file_format=manifest.FileFormat.PARQUET, partition=typedef.Record(),
            file_size_in_bytes=len(table.io.new_input(self.path)), sort_order_id=None,
            spec_id=table.metadata.default_spec_id, equality_ids=None, key_metadata=None,
            **statistics.to_serialized_dict())

    def abort(self) -> None:
        if self.rows:
            with contextlib.suppress(Exception):
                self._writer.close()
            self.files.table.io.delete(self.path)
