"""Resetting an app for reprocessing, as Kafka Streams' application reset tool does. Every topic the app reads
is of one of three classes:
- input: written by others only; the group's offsets go back (to their start, to a point in time, or by a
  number of records), and the app reads it again;
- intermediate: written by the app and read by it again (an agent sends to a topic another agent reads, as
  the README's word count does with `words`); the group's offsets go to its end, since the run after the
  reset writes its records anew (read from the start as well, each would be processed twice);
- internal: made by engine for the app (changelogs, repartition topics...); deleted.
The local state of its tables is wiped too. Run again, the app recomputes everything from there, with the
same results as the first time on the same input.

Who writes a topic the app reads is known from its declaration (sinks, `through`) and from its agents' and
timers' code (engine.topology.uses). Where the code sends to a topic it does not name (`out.send` on a
variable), the plan cannot tell an input from an intermediate topic: it refuses, naming those sends and the
topics in doubt, until `intermediate` or `inputs` (`--intermediate`, `--input`) says which each is. Either
also overrides what the plan found (a topic the app writes that others write too, to be read again whole).

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
from typing import TYPE_CHECKING, Literal

from engine.errors import ResetRefused
from engine.events import TP
from engine.topology.plan import build_topology
from engine.transport import transport_for

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from pathlib import Path

    from engine.app import App
    from engine.settings import Settings
    from engine.topology.plan import TopicPlan, Topology

Kind = Literal["input", "intermediate", "internal"]


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
class TopicClass:
    """What a topic the app reads is to a reset, and why."""

    kind: Kind
    why: str


@dataclass(frozen=True)
class ResetPlan:
    app_id: str
    target: ResetTarget
    classes: Mapping[str, TopicClass]  # every topic the app reads
    offsets: Mapping[TP, tuple[int | None, int]]  # input or intermediate partition -> (committed, after)
    deleted: tuple[str, ...]  # internal topics that exist and go
    kept: tuple[str, ...]  # dead-letter topics that exist and stay
    local_state: tuple[Path, ...]  # this machine's store folders of the app
    unknown: tuple[str, ...] = ()  # agents whose pipeline only a run declares: what it reads is not here

    def lines(self) -> list[str]:
        """The plan as a person reads it: each topic the app reads with its class, and each partition with
        its committed offset and where it goes."""
        out = [f"reset of app {self.app_id}: input topics to {self.target.describe()}, intermediate topics "
               "to their end, internal topics deleted"]
        for name, what in sorted(self.classes.items()):
            out.append(f"  {name}: {what.kind} ({what.why})")
            partitions = sorted(tp for tp in self.offsets if tp.topic == name)
            for tp in partitions:
                now, then = self.offsets[tp]
                out.append(f"    {tp.topic}[{tp.partition}]: {'-' if now is None else now} -> {then}")
            if not partitions and what.kind != "internal":
                out.append("    (does not exist yet)")
        if not self.classes:
            out.append("  (the app reads no topic)")
        out.extend(f"agent {name} declares its pipeline only when it runs: topics it forwards its stream to "
                   "there are not in this plan" for name in self.unknown)
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


async def plan_reset(app: App, settings: Settings, target: ResetTarget | None = None, *,
                     intermediate: Collection[str] = (), inputs: Collection[str] = ()) -> ResetPlan:
    """What a reset of `app` would do now (`intermediate`, `inputs`: topics said to be of that class);
    raises ResetRefused while its group has members, or while it cannot tell the class of a topic."""
    target = target or ResetTarget()
    if target.timestamp_ms is not None and target.shift_by is not None:
        raise ResetRefused("give a point in time or a shift, not both")
    topology = build_topology(app, settings)
    classes = classify(topology, intermediate=intermediate, inputs=inputs)
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
    read = [TP(name, p) for name, what in classes.items() if what.kind != "internal" and name in counts
            for p in range(counts[name])]
    sought = [tp for tp in read if classes[tp.topic].kind == "input"]
    reader = transport.consumer(group_id=None)
    await reader.start()
    try:
        bounds = await reader.offsets(read)
        at = await reader.offsets_at(sought, target.timestamp_ms) if target.timestamp_ms is not None else {}
    finally:
        await reader.stop()
    offsets: dict[TP, tuple[int | None, int]] = {}
    for tp in read:
        first, end = bounds[tp]
        now = committed.get(tp)
        if classes[tp.topic].kind == "intermediate":
            then = end  # what the next run writes to it, it reads; what is there was read already
        elif target.timestamp_ms is not None:
            then = at[tp]
        elif target.shift_by is not None:
            then = (first if now is None else now) + target.shift_by
        else:
            then = first
        offsets[tp] = (now, min(max(then, first), end))
    deleted = tuple(sorted(plan.name for plan in topology.topics.values()
                           if _internal(plan) and plan.name in counts))
    kept = tuple(sorted(plan.name for plan in topology.topics.values()
                        if plan.role == "dlq" and plan.name in counts))
    return ResetPlan(app.id, target, classes, offsets, deleted, kept, _local_state(settings),
                     tuple(topology.undeclared))


def classify(topology: Topology, *, intermediate: Collection[str] = (),
             inputs: Collection[str] = ()) -> dict[str, TopicClass]:
    """The class of every topic the app reads (its agents' and its tables' source topics); raises
    ResetRefused for a name given that the app does not read, and while a send in the app's code leaves the
    class of a topic in doubt."""
    read = {*topology.subscribed(), *(p.name for p in topology.topics.values() if p.role == "table-source")}
    for name in {*intermediate, *inputs}:
        if name not in read or _internal(topology.topics[name]):
            known = ", ".join(sorted(n for n in read if not _internal(topology.topics[n]))) or "none"
            raise ResetRefused(f"app {topology.app_id!r} does not read a topic {name!r} of its own (it reads "
                               f"{known}): only those are input or intermediate")
        if name in intermediate and name in inputs:
            raise ResetRefused(f"topic {name!r} is said to be both an input and an intermediate topic")
    classes: dict[str, TopicClass] = {}
    doubtful: list[str] = []  # inputs only because the code's sends that the plan cannot follow miss them
    for name in sorted(read):
        plan = topology.topics[name]
        if _internal(plan):
            classes[name] = TopicClass("internal", f"{plan.role} topic, made by engine")
        elif name in inputs:
            classes[name] = TopicClass("input", "as said")
        elif name in intermediate:
            classes[name] = TopicClass("intermediate", "as said")
        elif name in topology.writes:
            writers = "; ".join(map(str, topology.writes[name]))
            classes[name] = TopicClass("intermediate", f"written by {writers}")
        else:
            classes[name] = TopicClass("input", "nothing in the app writes it")
            doubtful.append(name)
    if topology.unresolved and doubtful:
        raise ResetRefused(
            "the plan cannot tell which of the topics it reads the app writes too: its code sends where it "
            f"does not name the topic ({'; '.join(topology.unresolved)}). An input topic (written by others) "
            "goes back to its start, an intermediate one (written by the app and read by it again) to its "
            "end, or its records would be processed twice: say which, with --input TOPIC or --intermediate "
            "TOPIC, for each of " + ", ".join(doubtful))
    return classes


def _internal(plan: TopicPlan) -> bool:
    """A topic engine made for the app (engine.topology.plan), which a reset deletes; but its dead letters,
    which stay."""
    return plan.internal and plan.role != "dlq"


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
