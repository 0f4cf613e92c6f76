"""Table-table joins: a table whose rows are (left, right) pairs, kept up to date from both sides.

    orders_with_customers = orders.left_join(customers)   # both keyed by customer id, co-partitioned

Kafka Streams' KTable-KTable join: an update on either side (from its changelog) is joined with the other
side's current value for the key and written to the result table (`None` for a missing side, under
`left_join` and `outer_join`); a row that no longer joins is deleted (a tombstone on the result's
changelog). Both sides are read where the update's partition is: the two tables must have the same keys,
key codec and partition count (co-partitioned, as Kafka Streams requires: the topology refuses to start if
their topics' counts differ, naming both).

Two internal agents (`<name>-left`, `<name>-right`) read the sides' changelogs, so the result follows each
side by a checkpoint (the changelog is written at checkpoints); it is an ordinary table (its own changelog,
recovery, standbys, queries, exactly-once). A table over a source topic (Kafka Streams' `builder.table`)
joins the same way: that topic is its changelog, each record handed to the agent once the table holds it
(engine.tasks.release), a null value deleting the key and the result's row with it. Each agent sees a
change with both sides' stores already holding every change before it, so once both changelogs are
processed, the result is the join of the two sides' states, whichever side was updated last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from engine.codecs import JoinPair
from engine.errors import ConfigError

if TYPE_CHECKING:
    from engine.streams.stream import Stream
    from engine.tables.base import BaseTable
    from engine.tables.declarer import Declarer

How = Literal["inner", "left", "outer"]


def join_tables(app: Declarer, left: BaseTable, right: BaseTable | Any, how: How, name: str | None
                ) -> BaseTable:
    """Declare the result table of `left` joined with `right` (a table, or a versioned table's face) and
    the agents that keep it."""
    right = joinable(app, getattr(right, "table", right))  # (a versioned table's face: the table underneath)
    for side in (left, right):
        if side.window is not None and side.key_layout != "versioned":
            raise ConfigError(f"table {side.name!r} cannot be joined with another table: it is windowed")
    if left.changelog_topic.key_type is not right.changelog_topic.key_type:
        raise ConfigError(f"tables {left.name!r} and {right.name!r} have other key types: a table join "
                          "pairs rows of the same key")
    result_name = name or f"{left.name}-{how}-join-{right.name}"
    topic = left.changelog_topic
    result = app.Table(result_name, key_type=topic.key_type, value_type=tuple,
                       value_serializer=JoinPair(
                           JoinPair.side(left.row_codec, left.changelog_topic.value_type),
                           JoinPair.side(right.row_codec, right.changelog_topic.value_type)),
                       key_serializer=left.plain_key_codec.name if topic.key_type is None else None)
    result.key_join_of = (left, right)

    def joined(key: Any, mine: Any, theirs: Any, mine_is_left: bool) -> None:
        pair = (mine, theirs) if mine_is_left else (theirs, mine)
        if how == "inner":
            keep = pair[0] is not None and pair[1] is not None
        elif how == "left":
            keep = pair[0] is not None
        else:
            keep = pair[0] is not None or pair[1] is not None
        if keep:
            result[key] = pair
        elif key in result:
            del result[key]

    def follower(mine: BaseTable, other: BaseTable, is_left: bool) -> Any:
        # A versioned side's changelog holds versions: only a change of a key's latest value joins.
        latest = mine.windowed.latest_change if mine.key_layout == "versioned" else None  # type: ignore[union-attr]
        theirs_of = other.windowed.find if other.key_layout == "versioned" else other.find  # type: ignore[union-attr]

        async def follow(stream: Stream) -> None:
            async for key, value in stream.items():
                if key is None:
                    continue  # a source topic's record without key: in no table (as Kafka Streams drops it)
                if latest is not None:
                    changed, key, value = latest(key, value)
                    if not changed:
                        continue
                found, theirs = theirs_of(key)
                joined(key, value, theirs if found else None, is_left)

        return follow

    app.agent(left.changelog(), name=f"{result_name}-left")(follower(left, right, True))
    app.agent(right.changelog(), name=f"{result_name}-right")(follower(right, left, False))
    return result


def joinable(app: Declarer, table: BaseTable) -> BaseTable:
    """`table` as a table join reads it. A global table over a source topic is read as a table over that
    topic, `<name>-partitioned` (its partitions restored and applied by the tasks, in their order, as any
    source table's), so that each side's change meets the other as of the same point of the input: its
    own store, followed apart from the tasks, would not (Kafka Streams has no table join with a global table
    for this reason). A global table with its own changelog (written by agents) cannot be joined."""
    if not table.is_global:
        return table
    if table.has_own_changelog:
        raise ConfigError(f"table {table.name!r} cannot be joined with another table: it is global and "
                          "written by agents; a global table over a source topic can be")
    twin = app.tables.get(f"{table.name}-partitioned")
    if twin is None:
        twin = app.Table(f"{table.name}-partitioned", source_topic=table.changelog_topic)
    return twin
