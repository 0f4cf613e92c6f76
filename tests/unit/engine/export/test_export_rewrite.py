"""The copy-on-write rewrite both lake formats use (engine.export.rewrite), on plain Parquet files: whatever
the order of rows in a file's row groups, exactly the rows of the removed keys and partitions go, the rest
stays in its order; a file with none of them is not rewritten; row groups whose statistics rule them out
are copied untested, and the others tested against only the keys in their range."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import pytest

pytest.importorskip("pyarrow", reason="the spark extra: pip install 'engine-streams[spark]'")

import pyarrow as pa
import pyarrow.parquet as pq

from engine.export import rewrite
from engine.export.rewrite import Rewrite, may_hold, write_files

if TYPE_CHECKING:
    from pathlib import Path

SCHEMA = pa.schema([pa.field("key", pa.string()), pa.field("partition", pa.int32()),
                    pa.field("value", pa.int64())])


class MemoryFile:
    """A new file that keeps its rows (what a format's writer would write)."""

    schema = SCHEMA

    def __init__(self, written: list[list[pa.Table]]) -> None:
        self.groups: list[pa.Table] = []
        written.append(self.groups)

    def write(self, rows: pa.Table) -> None:
        self.groups.append(rows)

    def close(self) -> Any | None:
        rows = sum(group.num_rows for group in self.groups)
        return rows or None

    def abort(self) -> None:
        self.groups.clear()


def parquet_file(path: Path, rows: list[tuple[str, int, int]], row_group: int) -> Path:
    keys, partitions, values = zip(*rows, strict=True)
    table = pa.table([pa.array(keys), pa.array(partitions, pa.int32()), pa.array(values)], schema=SCHEMA)
    pq.write_table(table, path, row_group_size=row_group)
    return path


@pytest.mark.parametrize("partitions", [[], [2]])
@pytest.mark.parametrize("ordered", [True, False])
def test_exactly_the_rows_of_removed_keys_and_partitions_go_in_any_row_order(
        tmp_path: Path, ordered: bool, partitions: list[int]) -> None:
    rng = random.Random(3)
    rows = [(f"k{n:05d}", n % 4, n) for n in range(5_000)]
    if not ordered:
        rng.shuffle(rows)
    source = parquet_file(tmp_path / "a.parquet", rows, 256)
    removed = set(rng.sample([key for key, _, _ in rows[:2_000]], 30)) | {"absent"}  # some row groups none
    written: list[list[pa.Table]] = []
    work = Rewrite(list(removed), pa.string(), partitions, pa.int32(), SCHEMA.names,
                   lambda: MemoryFile(written))
    result = work.files([source], lambda path: open(path, "rb"))  # noqa: SIM115  # closed by files()
    expected = [row for row in rows if row[0] not in removed and row[1] not in partitions]  # same order
    assert result == [(source, len(expected))]
    (groups,) = written
    assert [tuple(row.values()) for group in groups for row in group.to_pylist()] == expected
    assert len(groups) == 1  # gathered into row groups of ROW_GROUP rows: here all of them


def test_a_file_without_removed_rows_is_not_rewritten_and_statistics_rule_out_files(tmp_path: Path) -> None:
    source = parquet_file(tmp_path / "a.parquet", [(f"k{n}", 0, n) for n in range(10)], 4)
    written: list[list[pa.Table]] = []
    work = Rewrite(["other"], pa.string(), [], pa.int32(), SCHEMA.names, lambda: MemoryFile(written))
    assert work.files([source], lambda path: open(path, "rb")) == []  # noqa: SIM115
    assert written == []
    assert not may_hold(("k0", "k9", 0, 0), ["other"], [])  # "other" sorts after "k9"
    assert may_hold(("k0", "k9", 0, 0), ["k5"], [])
    assert may_hold(("k0", "k9", 0, 3), [], [2])
    assert may_hold((None, None, 0, 0), ["x"], [])  # no statistics: read it


def test_written_rows_roll_into_files_of_about_file_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewrite, "FILE_BYTES", 2_000)
    monkeypatch.setattr(rewrite, "ROW_GROUP", 50)
    batch = pa.record_batch([pa.array([f"k{n}" for n in range(40)]), pa.array([0] * 40, pa.int32()),
                             pa.array(range(40))], schema=SCHEMA)
    written: list[list[pa.Table]] = []
    entries = write_files([batch] * 10, lambda: MemoryFile(written))
    per_file = -(-2_000 // batch.nbytes) * 40  # a file is closed once 2,000 bytes were written to it
    assert entries == [per_file] * (400 // per_file) + ([400 % per_file] if 400 % per_file else [])
    assert len(entries) > 1
    for groups in written:  # batches gathered into row groups of 50 rows or more (the last one: the rest)
        assert all(group.num_rows >= 50 for group in groups[:-1]), [g.num_rows for g in groups]
