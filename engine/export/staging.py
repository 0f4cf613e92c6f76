"""Where the workers stage an export round (engine.export.rounds): a directory on a file system, this
machine's or an object store's, through pyarrow's file systems (one mechanism for both).

A round's files are written under `<root>/<round>/`. A file meant to be seen whole (a data file, a
manifest) is written under a temporary name and moved to its own: on a local disk a rename, on an object
store a copy of one object, which readers see whole or not at all. So a reader that finds a manifest finds
it complete, and the data files it names complete too (they are moved before it is written).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from engine.export.optional import needs

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

TEMPORARY = ".tmp"


class StagingArea:
    """The staging directory `root` on the pyarrow file system `fs` (paths as that file system takes them:
    absolute on the local one, `bucket/key` on an object store's)."""

    def __init__(self, fs: Any, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")

    def path(self, round_: int, name: str = "") -> str:
        """A file of round `round_` (or the round's directory)."""
        return f"{self.root}/{round_}/{name}" if name else f"{self.root}/{round_}"

    def rounds(self) -> list[int]:
        """The rounds with a staging directory."""
        with needs("pyarrow", "lake export"):
            import pyarrow.fs as fs_module
        found = self.fs.get_file_info(fs_module.FileSelector(self.root, allow_not_found=True))
        return [int(info.base_name) for info in found
                if info.type == fs_module.FileType.Directory and info.base_name.lstrip("-").isdigit()]

    def open_round(self, round_: int) -> None:
        """Create the round's directory (a worker stages into it; on an object store, a marker)."""
        self.fs.create_dir(self.path(round_), recursive=True)

    def exists(self, path: str) -> bool:
        with needs("pyarrow", "lake export"):
            import pyarrow.fs as fs_module
        file_type = fs_module.FileType.File
        return bool(self.fs.get_file_info(path).type == file_type)

    @contextlib.contextmanager
    def _published(self, path: str) -> Iterator[str]:
        """A temporary name to write `path` under; moved to `path` once the block ended without an error."""
        yield path + TEMPORARY
        self.fs.move(path + TEMPORARY, path)

    @contextlib.contextmanager
    def parquet_writer(self, path: str, schema: pa.Schema) -> Iterator[Any]:
        """A Parquet writer to `path`, seen there only once it closed without an error."""
        with needs("pyarrow", "lake export"):
            import pyarrow.parquet as parquet
        with self._published(path) as written, \
                parquet.ParquetWriter(written, schema, filesystem=self.fs) as writer:
            yield writer

    def write_table(self, path: str, table: pa.Table) -> None:
        with self.parquet_writer(path, table.schema) as writer:
            writer.write_table(table)

    def write_text(self, path: str, text: str) -> None:
        """`text` at `path`, whole or not at all (a stage's commit point)."""
        with self._published(path) as written, self.fs.open_output_stream(written) as out:
            out.write(text.encode())

    def read_text(self, path: str) -> str | None:
        """The text at `path`, or None if there is none (one request: no existence check first)."""
        try:
            with self.fs.open_input_stream(path) as stream:
                return bytes(stream.read()).decode()
        except FileNotFoundError:
            return None

    def batches(self, path: str, rows: int) -> Iterator[pa.RecordBatch]:
        with needs("pyarrow", "lake export"):
            import pyarrow.parquet as parquet
        with self.fs.open_input_file(path) as source:
            yield from parquet.ParquetFile(source).iter_batches(rows)

    def read_table(self, path: str) -> pa.Table:
        with needs("pyarrow", "lake export"):
            import pyarrow.parquet as parquet
        return parquet.read_table(path, filesystem=self.fs)

    def remove_round(self, round_: int) -> None:
        """Remove a round's files; one already gone (another committer removed it) is no error."""
        with contextlib.suppress(OSError):
            self.fs.delete_dir(self.path(round_))
