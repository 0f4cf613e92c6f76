"""Poison records: a record whose processing makes this worker lose its partition, again and again.

An agent that blocks the event loop (a blocking client library, `time.sleep`, a long computation) stops the
worker's heartbeats with it. Held past the group's session timeout, the worker loses its partitions, its
uncommitted work is dropped (rightly), the record is fetched again after the rebalance, blocks again, and so
on for ever: the partition never moves past it, and everything processed since its last commit is processed
again each time.

The loop monitor (engine.monitors.loopwatch) names the events in progress while the loop was blocked
(`suspect`). When their partition is then taken away from this worker (revoked or lost), each such record
counts one loss. A record that reaches `limit` losses is not handed to its agent again: it is dead-lettered
(or stops the worker, by the agent's error policy) with a PoisonRecord error that says why.

The count is this worker's own: a record that blocks every worker it lands on is counted by each of them, so
with W workers it may cycle up to W * (limit - 1) + 1 times before one of them dead-letters it.

Pure (no I/O, no clock): tested without Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import EngineError

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.events import TP

DEFAULT_LIMIT = 3


class PoisonRecord(EngineError):
    """A record during which its partition was lost too many times (it blocks the event loop, or outlasts
    the group's session or the transaction timeout): dead-lettered so that its partition moves on."""


class PoisonRecords:
    """Losses per record (topic, partition, offset) while an agent was processing it."""

    __slots__ = ("_blocked", "_losses", "buried", "limit", "suspects")

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        # Events in progress during a blocked loop, by partition: offset -> (agent, seconds blocked).
        self.suspects: dict[TP, dict[int, tuple[str, float]]] = {}
        self._losses: dict[tuple[TP, int], int] = {}
        self._blocked: dict[tuple[TP, int], tuple[str, float]] = {}
        # Partitions holding a record at the limit: what the fetch loop checks per batch (usually empty).
        self.buried: set[TP] = set()

    def suspect(self, tp: TP, offset: int, agent: str, blocked_for: float) -> None:
        """The loop was blocked for `blocked_for` seconds while `agent` processed `tp`@`offset`."""
        known = self.suspects.setdefault(tp, {}).get(offset)
        if known is None or known[1] < blocked_for:
            self.suspects[tp][offset] = (agent, blocked_for)

    def lost(self, tps: Collection[TP]) -> list[tuple[TP, int, int]]:
        """These partitions were taken away: each suspect record of theirs counts one loss. Returns
        (partition, offset, losses) of every record counted."""
        counted = []
        for tp in tps:
            for offset, (agent, blocked_for) in self.suspects.pop(tp, {}).items():
                key = (tp, offset)
                losses = self._losses[key] = self._losses.get(key, 0) + 1
                self._blocked[key] = (agent, blocked_for)
                if losses >= self.limit:
                    self.buried.add(tp)
                counted.append((tp, offset, losses))
        return counted

    def verdict(self, tp: TP, offset: int) -> tuple[str, PoisonRecord] | None:
        """(agent, error) if the record `tp`@`offset` reached the limit (then it is forgotten: dealt with
        once), else None."""
        key = (tp, offset)
        losses = self._losses.get(key, 0)
        if losses < self.limit:
            return None
        agent, blocked_for = self._blocked.pop(key)
        del self._losses[key]
        if not any(t == tp and self._losses[(t, o)] >= self.limit for t, o in self._losses):
            self.buried.discard(tp)
        return agent, PoisonRecord(
            f"{tp.topic}[{tp.partition}] was taken from this worker {losses} times while agent {agent!r} "
            f"processed offset {offset}, which blocked the event loop for {blocked_for:.1f}s (a blocking "
            "call in the agent? its stack was logged); the record is set aside so that its partition moves"
            " on"
        )
