"""Poison records: a record whose processing makes this worker lose its partition, again and again.

An agent that blocks the event loop (a blocking client library, `time.sleep`, a long computation) stops the
worker's heartbeats with it. Held past the group's session timeout, the worker loses its partitions, its
uncommitted work is dropped (rightly), the record is fetched again after the rebalance, blocks again, and so
on for ever: the partition never moves past it, and everything processed since its last commit is processed
again each time.

An agent that awaits inside one event (a slow remote call) does not stop the loop, but under exactly-once
it holds its task's transaction open (a checkpoint never commits half an event). Past the transaction
timeout the broker aborts that transaction; when the event ends, the task's commit fails, it is fenced and
rewound to its last commit, and the record is processed again: the same cycle, with the partition kept.

Both are counted the same way. The loop monitor (engine.monitors.loopwatch) names the events in progress
while the loop was blocked, and the checkpoint names the events that held their task's transaction open
longer than the transaction timeout (`suspect`). When their partition is then taken away from this worker
(revoked or lost), or their task is rewound, each such record counts one loss; a suspect whose offset was
committed since is forgotten (it cannot come back). A record that reaches `limit` losses is not handed to
its agent again: it is dead-lettered (or stops the worker, by the agent's error policy) with a PoisonRecord
error that says why.

The count is this worker's own: a record that blocks every worker it lands on is counted by each of them, so
with W workers it may cycle up to W * (limit - 1) + 1 times before one of them dead-letters it.

Pure (no I/O, no clock): tested without Kafka.
"""

from __future__ import annotations

import enum
import logging
from typing import TYPE_CHECKING

from engine.errors import PoisonRecord

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.events import TP

DEFAULT_LIMIT = 3

log = logging.getLogger(__name__)


class Cause(enum.Enum):
    """What a record did that costs its partition: the phrase the PoisonRecord error says it with."""

    BLOCKED_LOOP = "blocked the event loop"
    OPEN_TRANSACTION = "kept its task's transaction open"


class PoisonRecords:
    """Losses per record (topic, partition, offset) while an agent was processing it."""

    __slots__ = ("_blamed", "_losses", "buried", "limit", "suspects")

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        # Events in progress during a blocked loop, or holding their task's transaction open past its
        # timeout, by partition: offset -> (agent, seconds, cause).
        self.suspects: dict[TP, dict[int, tuple[str, float, Cause]]] = {}
        self._losses: dict[tuple[TP, int], int] = {}
        self._blamed: dict[tuple[TP, int], tuple[str, float, Cause]] = {}
        # Partitions holding a record at the limit: what the fetch loop checks per batch (usually empty).
        self.buried: set[TP] = set()

    def suspect(self, tp: TP, offset: int, agent: str, seconds: float,
                cause: Cause = Cause.BLOCKED_LOOP) -> None:
        """While `agent` processed `tp`@`offset`, the loop was blocked for `seconds` (or, by `cause`, the
        event held its task's transaction open that long, past the transaction timeout)."""
        known = self.suspects.setdefault(tp, {}).get(offset)
        if known is None or known[1] < seconds:
            self.suspects[tp][offset] = (agent, seconds, cause)

    def committed(self, tp: TP, offset: int) -> None:
        """`tp` committed up to `offset`: the suspects below it are done with (never processed again)."""
        suspects = self.suspects.get(tp)
        if suspects:
            for done in [at for at in suspects if at < offset]:
                del suspects[done]

    def lost(self, tps: Collection[TP]) -> list[tuple[TP, int, int]]:
        """These partitions were taken away (or their tasks rewound): each suspect record of theirs counts one
        loss, said in a warning. Returns (partition, offset, losses) of every record counted."""
        counted = []
        for tp in tps:
            for offset, blamed in self.suspects.pop(tp, {}).items():
                key = (tp, offset)
                losses = self._losses[key] = self._losses.get(key, 0) + 1
                self._blamed[key] = blamed
                if losses >= self.limit:
                    self.buried.add(tp)
                counted.append((tp, offset, losses))
                log.warning("%s[%d] was taken from this worker (or its task rewound) while offset %d, which "
                            "blocked the event loop or held its transaction open past the transaction "
                            "timeout, was processed (%d of %d times before it is set aside)", tp.topic,
                            tp.partition, offset, losses, self.limit)
        return counted

    def verdict(self, tp: TP, offset: int) -> tuple[str, PoisonRecord] | None:
        """(agent, error) if the record `tp`@`offset` reached the limit (then it is forgotten: dealt with
        once), else None."""
        key = (tp, offset)
        losses = self._losses.get(key, 0)
        if losses < self.limit:
            return None
        agent, seconds, cause = self._blamed.pop(key)
        del self._losses[key]
        if not any(t == tp and self._losses[(t, o)] >= self.limit for t, o in self._losses):
            self.buried.discard(tp)
        if cause is Cause.BLOCKED_LOOP:
            why = (f"was taken from this worker {losses} times while agent {agent!r} processed offset "
                   f"{offset}, which blocked the event loop for {seconds:.1f}s (a blocking call in the "
                   "agent? its stack was logged)")
        else:
            why = (f"lost its task's transaction {losses} times while agent {agent!r} processed offset "
                   f"{offset}, which kept the transaction open for {seconds:.1f}s, past the transaction "
                   "timeout (the broker aborts a transaction open that long; an event must finish well "
                   "within `transaction_timeout`)")
        return agent, PoisonRecord(f"{tp.topic}[{tp.partition}] {why}; the record is set aside so that its "
                                   "partition moves on")
