"""Resetting an app for reprocessing, as Kafka Streams' application reset tool does: the group's offsets on
the topics the app reads go back (to their start, to a point in time, or by a number of records), the
internal topics it made are deleted, and the local state of its tables is wiped. Run again, the app
recomputes everything from there, with the same results as the first time on the same input.

A reset needs a group without members: a running worker would commit its own offsets over the reset ones
and write its tables back. `plan_reset` refuses then and otherwise says what would be done; `execute`
does it. What is deleted: changelogs, repartition topics, closed-window and late-record topics, the reply
topic (they are recreated empty when the app starts). What is kept: the topics the app reads and writes
that are the user's (sources, sinks, a table's own source topic), and dead-letter topics (a record of
what failed; delete them by hand to forget it). Stores of this app on other machines need no wiping: their
changelogs are recreated under new topic ids, so a worker finds them stale and rebuilds them
(engine.tables.recovery).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.errors import EngineError
from engine.events import TP
from engine.topology.plan import build_topology
from engine.transport import transport_for

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from engine.app import App
    from engine.settings import Settings

# Roles (engine.topology.plan) whose topics a reset deletes, and whose topics it rewinds.
DELETED_ROLES = ("changelog", "repartition", "closed", "late", "replies")
INPUT_ROLES = ("source", "table-source")


class ResetRefused(EngineError):
    """The app cannot be reset now (a worker of it is running)."""


@dataclass(frozen=True)
class ResetTarget:
    """Where the input offsets go: the start of each partition (the default), the first record at or after
    `timestamp_ms`, or `shift_by` records from the committed offset (negative: back), kept inside the log."""

    timestamp_ms: int | None = None
    shift_by: int | None = None

    def describe(self) -> str:
        if self.timestamp_ms is not None:
            return f"the first record at or after {self.timestamp_ms} ms"
        if self.shift_by is not None:
            return f"the committed offset shifted by {self.shift_by}"
        return "the start of each partition"


@dataclass(frozen=True)
class ResetPlan:
    app_id: str
    target: ResetTarget
    offsets: Mapping[TP, tuple[int | None, int]]  # input partition -> (committed now, after the reset)
    deleted: tuple[str, ...]  # internal topics that exist and go
    kept: tuple[str, ...]  # dead-letter topics that exist and stay
    local_state: tuple[Path, ...]  # this machine's store folders of the app

    def lines(self) -> list[str]:
        """The plan as a person reads it."""
        out = [f"reset of app {self.app_id}: input offsets to {self.target.describe()}"]
        for tp in sorted(self.offsets):
            now, then = self.offsets[tp]
            out.append(f"  {tp.topic}[{tp.partition}]: {'-' if now is None else now} -> {then}")
        if not self.offsets:
            out.append("  (no input topic exists yet)")
        out.append("internal topics to delete (recreated empty at the next start):")
        out.extend(f"  {name}" for name in self.deleted)
        if not self.deleted:
            out.append("  (none exists)")
        if self.kept:
            out.append("dead-letter topics kept: " + ", ".join(self.kept))
        out.append("local state to wipe:")
        out.extend(f"  {path}" for path in self.local_state)
        if not self.local_state:
            out.append("  (none on this machine)")
        return out


async def plan_reset(app: App, settings: Settings, target: ResetTarget | None = None) -> ResetPlan:
    """What a reset of `app` would do now; raises ResetRefused while its group has members."""
    target = target or ResetTarget()
    if target.timestamp_ms is not None and target.shift_by is not None:
        raise ResetRefused("give a point in time or a shift, not both")
    topology = build_topology(app, settings)
    transport = transport_for(settings)
    admin = transport.admin()
    try:
        group = await admin.describe_group(app.id)
        if group.members:
            raise ResetRefused(
                f"group {app.id} has {len(group.members)} member(s) ({group.state}): stop every worker of "
                "the app first (a running worker would commit over the reset offsets)")
        counts = await admin.describe_topics()
        committed = await admin.committed(app.id)
    finally:
        await admin.close()
    inputs = [TP(plan.name, p) for plan in topology.topics.values()
              if plan.role in INPUT_ROLES and plan.name in counts for p in range(counts[plan.name])]
    reader = transport.consumer(group_id=None)
    await reader.start()
    try:
        bounds = await reader.offsets(inputs)
        at = await reader.offsets_at(inputs, target.timestamp_ms) if target.timestamp_ms is not None else {}
    finally:
        await reader.stop()
    offsets: dict[TP, tuple[int | None, int]] = {}
    for tp in inputs:
        first, end = bounds[tp]
        now = committed.get(tp)
        if target.timestamp_ms is not None:
            then = at[tp]
        elif target.shift_by is not None:
            then = (first if now is None else now) + target.shift_by
        else:
            then = first
        offsets[tp] = (now, min(max(then, first), end))
    deleted = tuple(sorted(plan.name for plan in topology.topics.values()
                           if plan.role in DELETED_ROLES and plan.name in counts))
    kept = tuple(sorted(plan.name for plan in topology.topics.values()
                        if plan.role == "dlq" and plan.name in counts))
    return ResetPlan(app.id, target, offsets, deleted, kept, _local_state(settings))


async def execute(plan: ResetPlan, settings: Settings) -> None:
    """Do what `plan` says: offsets first (checked again that nobody joined the group meanwhile), then the
    internal topics, then the local stores."""
    admin = transport_for(settings).admin()
    try:
        group = await admin.describe_group(plan.app_id)
        if group.members:
            raise ResetRefused(f"group {plan.app_id} has members again ({len(group.members)}); nothing done")
        if plan.offsets:
            await admin.set_committed(plan.app_id, {tp: then for tp, (_, then) in plan.offsets.items()})
        if plan.deleted:
            await admin.delete_topics(plan.deleted)
    finally:
        await admin.close()
    for path in plan.local_state:
        shutil.rmtree(path, ignore_errors=True)


def _local_state(settings: Settings) -> tuple[Path, ...]:
    """The app's store folders under its data dir (one per table); the worker's identity file stays, so
    that a restarted worker still fences its predecessor's transactions."""
    folder = settings.app_dir
    if not folder.is_dir():
        return ()
    return tuple(sorted(path for path in folder.iterdir() if path.is_dir()))
