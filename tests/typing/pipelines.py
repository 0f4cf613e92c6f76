"""What an editor and mypy know of a pipeline's aggregation: the table it returns, typed by its window.
Checked by `mypy tests/typing` (tests/run.sh): `assert_type` checks nothing at run time."""

from __future__ import annotations

from typing import assert_type

import engine
from engine.tables.sessions import SessionTable
from engine.tables.sliding import SlidingTable
from engine.tables.table import Table
from engine.tables.windowed import WindowedTable

app = engine.App("typed")
clicks = app.topic("clicks", key_type=str, value_type=dict)
assert_type(app.stream(clicks).count("a"), Table)
assert_type(app.stream(clicks).filter(bool).map(len).sum("b"), Table)
assert_type(app.stream(clicks).group_by(len, name="n", key_type=int).tumbling(60).count("c"), WindowedTable)
assert_type(app.stream(clicks).hopping(60, 10).reduce("d", max), WindowedTable)
assert_type(app.stream(clicks).session(30).aggregate("e", 0, lambda n, _: n + 1, merge=max), SessionTable)
assert_type(app.stream(clicks).sliding(30).count("f"), SlidingTable)
