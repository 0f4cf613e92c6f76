"""Copy-on-write deletes: how a lake table loses rows in an incremental export (engine.export.lake), for
both formats. The rows of a changed key (and of a partition copied in full) are replaced whole: every data
file that holds one of them is read again without them and replaced by what is left, and the keys' rows as
of the snapshot are added, in one commit. A file that holds none is kept as it is.

Why not a MERGE (delta-rs has one): it rewrites the same files, but joins every row of the table with the
changes and holds more of it in memory; a set lookup per row, a row group at a time, does the same work
with less. Why not merge-on-read (deletion vectors, delete files): neither delta-rs nor pyiceberg writes
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.export.columns import KEY, PARTITION
from engine.export.optional import require

if TYPE_CHECKING:
    import pyarrow as pa


def removed_rows(rows: pa.Table | pa.RecordBatch, keys: pa.Array, partitions: pa.Array) -> pa.Array | None:
    """Which of `rows` go: those whose key is in `keys` or whose partition is in `partitions` (a boolean
    mask), or None when none does."""
    compute = require("pyarrow.compute", "lake export")
    gone = compute.is_in(rows.column(KEY), value_set=keys)
    if len(partitions):
        gone = compute.or_(gone, compute.is_in(rows.column(PARTITION), value_set=partitions))
    return gone if compute.any(gone).as_py() else None
