"""Replaying changelogs into stores: for recovery (to the end, then stop) and for following (forever).

Records go into the store as the raw bytes they are (the changelog key and value encodings are the store's),
a batch per fetch, with the offset of the batch's last record written atomically alongside. A store that
does not reflect this log is rebuilt from the start, since it may hold keys the log never had or has since
deleted: one recorded for another topic of the same name (deleted and recreated: its topic id differs), or
whose offset does not fit the log (truncated, or compacted past it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from engine.errors import OffsetOutOfRange
from engine.events import TP

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from engine.events import RawRecord
    from engine.transport.base import Consumer

log = logging.getLogger(__name__)

FETCH = 20_000


class ChangelogSink(Protocol):
    """Where replayed changelog records go: a store (recovery, standbys), or anything else that keeps the
    offset it reached (a lake export collecting the keys written since its last version)."""

    def changelog_offset(self) -> int | None: ...

    def changelog_identity(self) -> bytes | None: ...

    def set_changelog_identity(self, identity: bytes) -> None: ...

    def write(self, updates: Mapping[bytes, bytes | None], changelog_offset: int | None) -> None: ...


Sink = TypeVar("Sink", bound=ChangelogSink)


@dataclass
class Progress:
    """Recovery progress, readable while it runs (records applied, what is left, rate)."""

    applied: int = 0
    remaining: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.applied / elapsed if elapsed > 0 else 0.0


@runtime_checkable
class RecordApplier(Protocol):
    """A store that makes its own records of a changelog's (a versioned table over a source topic's:
    engine.tables.versioned_source), with the batch's offset."""

    def apply_records(self, records: list[RawRecord]) -> None: ...


def apply_batch(store: ChangelogSink, records: list) -> int:  # type: ignore[type-arg]
    """Write one fetched batch of changelog records (raw bytes; None values delete)."""
    if isinstance(store, RecordApplier):
        store.apply_records(records)
        return len(records)
    updates: dict[bytes, bytes | None] = {}
    for record in records:
        if record.key is not None:
            updates[record.key] = record.value
    store.write(updates, records[-1].offset)
    return len(records)


async def start_positions(
    reader: Consumer,
    stores: Mapping[TP, Sink],
    rebuild: Callable[[TP], Sink],
    identities: Mapping[str, bytes],
    until: Mapping[TP, int] | None = None,
    tables: Mapping[str, str] | None = None,
) -> tuple[dict[TP, int], dict[TP, int], dict[TP, Sink]]:
    """Where each partition's replay starts and ends (the log's end, or `until` for a partition given
    there); rebuilds stores that do not fit their log or are past `until` (a store written past where its
    task resumes reading would show events a later state), and records in each store the id of the log it
    reflects (`identities`: topic ids, where the broker tells them). A store below the log's start (records
    deleted under it: DeleteRecords, retention) is rebuilt from what the log holds, never read on from the
    start as if nothing were missing: the deleted records may have overwritten or deleted its keys. This is
    the one rule for recovery and for followers (`tables`, changelog topic to table name, for the WARNING)."""
    until = until or {}
    bounds = await reader.offsets(list(stores))
    starts: dict[TP, int] = {}
    ends: dict[TP, int] = {}
    fitted = dict(stores)
    for tp, store in stores.items():
        first, end = bounds[tp]
        if tp in until:
            end = max(min(end, until[tp]), first)
        stored = store.changelog_offset()
        identity, recorded = identities.get(tp.topic), store.changelog_identity()
        if identity is not None and recorded is not None and identity != recorded:
            log.warning("store of %s[%d] reflects another topic of that name (deleted and recreated since); "
                        "rebuilding it", tp.topic, tp.partition)
            store = fitted[tp] = rebuild(tp)
            stored = None
        elif stored is not None and tp in until and first <= end <= stored:
            log.warning("store of %s[%d] is at offset %d, past where its task resumes reading the topic "
                        "(%d): rebuilding it up to there", tp.topic, tp.partition, stored, end)
            store = fitted[tp] = rebuild(tp)
            stored = None
        elif stored is not None and stored < first - 1:
            log.warning(
                "table %s: the store of %s[%d] is at changelog offset %d but the log now starts at %d: "
                "records deleted under it, a gap of %d offsets [%d, %d) lost; rebuilding it from what the "
                "log holds, [%d, %d)",
                (tables or {}).get(tp.topic, tp.topic), tp.topic, tp.partition, stored, first,
                first - stored - 1, stored + 1, first, first, end,
            )
            store = fitted[tp] = rebuild(tp)
            stored = None
        elif stored is not None and stored >= end:
            # A store is written only with what its log acknowledged, under exactly-once after the commit
            # (every owner fences the task's transactional id before it reads: engine.commit.transactions).
            # `end` is the last stable offset: a transaction without its marker holds it back too.
            log.warning(
                "table %s: the store of %s[%d] is at changelog offset %d but the log holds [%d, %d): records "
                "or transaction markers the store reflects are not committed in the log (a broker that lost "
                "what it acknowledged, as an unclean leader election can; a transaction left without its "
                "marker: `kafka-transactions.sh find-hanging`), or the store was written from another log; "
                "rebuilding it from what the log holds",
                (tables or {}).get(tp.topic, tp.topic), tp.topic, tp.partition, stored, first, end,
            )
            store = fitted[tp] = rebuild(tp)
            stored = None
        if identity is not None and recorded != identity:
            store.set_changelog_identity(identity)
        starts[tp] = first if stored is None else stored + 1
        ends[tp] = end
    return starts, ends, fitted


async def replay_to_end(
    reader: Consumer,
    stores: Mapping[TP, Sink],
    rebuild: Callable[[TP], Sink],
    progress: Progress,
    label: str,
    identities: Mapping[str, bytes] | None = None,
    until: Mapping[TP, int] | None = None,
    tables: Mapping[str, str] | None = None,
) -> dict[TP, int]:
    """Replay each partition's changelog from its store's offset to the current end (or to `until`, for
    the partitions given there); returns counts. Records deleted below the reader while it replays (a
    reader made with auto_offset_reset="none" says so) rebuild the stores concerned, by the same rule as at
    the start: recovery never waits for offsets that will not come, nor reads on past a gap."""
    starts, ends, fitted = await start_positions(reader, stores, rebuild, identities or {}, until, tables)
    todo = {tp for tp in fitted if starts[tp] < ends[tp]}
    counts = dict.fromkeys(fitted, 0)
    if not todo:
        return counts
    reader.assign(todo)
    for tp in todo:
        reader.seek(tp, starts[tp])
    positions = {tp: starts[tp] for tp in todo}
    progress.remaining += sum(ends[tp] - starts[tp] for tp in todo)
    last_log = time.monotonic()
    while todo:
        try:
            batches = await reader.getmany(0.5, FETCH)
        except OffsetOutOfRange as exc:
            trimmed = {tp: fitted[tp] for tp in exc.offsets if tp in todo}
            if not trimmed:
                raise
            again, _, refitted = await start_positions(reader, trimmed, rebuild, {}, until, tables)
            for tp, store in refitted.items():
                fitted[tp] = store
                progress.remaining -= again[tp] - positions[tp]
                positions[tp] = again[tp]
                reader.seek(tp, again[tp])
                if again[tp] >= ends[tp]:
                    todo.discard(tp)
            continue
        if not batches:
            # Nothing came: a log may end in control records we never see. Trust the position (and count
            # the offsets of those records done: what is remaining goes back to 0).
            for tp in list(todo):
                if await reader.position(tp) >= ends[tp]:
                    todo.discard(tp)
                    progress.remaining -= ends[tp] - positions[tp]
                    positions[tp] = ends[tp]
        for tp, records in batches.items():
            key = TP(tp[0], tp[1])
            if key not in todo or not records:
                continue
            records = [r for r in records if r.offset < ends[key]]
            if not records:
                continue
            applied = apply_batch(fitted[key], records)
            counts[key] += applied
            progress.applied += applied
            done = records[-1].offset + 1 - positions[key]
            positions[key] = records[-1].offset + 1
            progress.remaining -= done
            if positions[key] >= ends[key]:
                todo.discard(key)
        if time.monotonic() - last_log > 2:
            last_log = time.monotonic()
            log.info("%s: recovering, %d records applied (%.0f/s), %d remaining",
                     label, progress.applied, progress.rate, max(progress.remaining, 0))
        await asyncio.sleep(0)  # let the loop breathe between large batches
    return counts
