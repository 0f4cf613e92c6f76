"""The late events of one windowed table in one worker run: the count `table.late_events`, `/metrics` and
`engine status` show, and when the WARNING about them may repeat.

Why per run and not per table: a table is declared once, at module level, and outlives the workers that run
it; a second worker of the same app in one process (a second TestDriver, a restart inside a test) starts from
zero and warns again, and two workers at once count their own events. The throttle reads the clock the
worker runs on (its event loop's), so under the test driver's virtual time a warning repeats after
`advance()` as it would after that much real time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

LATE_WARNING_INTERVAL = 10.0  # seconds between two warnings about a table's late events
LATEST_KEPT = 10  # late events kept for the worker's page


@dataclass(frozen=True)
class LateEvent:
    """One late event, as the worker's page shows it: where it was, and how far behind stream time."""

    at: float  # wall-clock time it was seen
    topic: str
    partition: int
    offset: int
    behind_ms: int


@dataclass
class LateEvents:
    """One run's late events of one table, and what the next WARNING reports."""

    count: int = 0
    unreported: int = 0  # since the last warning
    needed_ms: int = 0  # the largest grace that would have kept those
    reported_at: float | None = None  # the loop time of the last warning
    latest: deque[LateEvent] = field(default_factory=lambda: deque(maxlen=LATEST_KEPT))

    def add(self, needed_ms: int, now: float) -> tuple[int, int] | None:
        """Count one late event that needed `needed_ms` of grace, at loop time `now`; when a warning is due,
        (events since the last one, the grace that would have kept them), and the next starts from here."""
        self.count += 1
        self.unreported += 1
        self.needed_ms = max(self.needed_ms, needed_ms)
        if self.reported_at is not None and now - self.reported_at < LATE_WARNING_INTERVAL:
            return None
        report = self.unreported, self.needed_ms
        self.unreported, self.needed_ms, self.reported_at = 0, 0, now
        return report
