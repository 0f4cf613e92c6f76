"""The delivery futures of a producer's sends, until a flush checks that the broker acknowledged them all.

A flush must raise if any record sent since the previous flush failed. Keeping every future until then made
each one live for a whole commit interval: at a busy worker's rate they were promoted to the oldest garbage
collector generation, and every full collection rescanned them all (what that cost: benchmarks/README.md).
So the futures already settled are dropped every so often, their first failure kept: a future lives
about as long as its batch's round trip, as in a raw aiokafka loop. The pruning is amortised O(1) per send:
it runs when the list doubles past what the last pruning kept (a done-callback per future would cost a
`call_soon` per record instead).

Invariant: `failure` is the first failure among the futures already dropped; `pending` holds every future
not yet dropped. Pure but for the futures: tested without Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio

PRUNE_AT_LEAST = 1024  # sends between two prunings at the least


class DeliveryFailure(Exception):
    """What a failed delivery future held (or that it was cancelled)."""


class Deliveries:
    __slots__ = ("_prune_at", "failure", "pending")

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[object]] = []
        self.failure: BaseException | None = None
        self._prune_at = PRUNE_AT_LEAST

    def add(self, future: asyncio.Future[object]) -> None:
        pending = self.pending
        pending.append(future)
        if len(pending) >= self._prune_at:
            self._prune()

    def _prune(self) -> None:
        kept = []
        for future in self.pending:
            if not future.done():
                kept.append(future)
            elif (failure := _failure_of(future)) is not None and self.failure is None:
                self.failure = failure
        self.pending = kept
        self._prune_at = max(PRUNE_AT_LEAST, 2 * len(kept))

    def take(self) -> tuple[list[asyncio.Future[object]], BaseException | None]:
        """Start a check: the futures still to wait for and the failure seen so far; both start afresh."""
        taken, failure = self.pending, self.failure
        self.pending, self.failure, self._prune_at = [], None, PRUNE_AT_LEAST
        return taken, failure


def _failure_of(future: asyncio.Future[object]) -> BaseException | None:
    """What a settled future failed with (its exception retrieved: asyncio does not log it), or None."""
    if future.cancelled():
        return DeliveryFailure("cancelled")
    return future.exception()


def first_failure(futures: list[asyncio.Future[object]]) -> BaseException | None:
    """The first failure among settled `futures` (each one's exception retrieved), or None."""
    found = None
    for future in futures:
        failure = _failure_of(future)
        if found is None:
            found = failure
    return found
