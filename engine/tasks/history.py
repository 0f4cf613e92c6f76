"""What the group's assignments moved to and from this worker, the latest first: what the worker's page shows
as its last rebalances (an assignment that moved nothing is counted, `TaskManager.rebalances`, not kept)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Collection

KEPT = 20  # changes kept


@dataclass(frozen=True)
class Change:
    """One assignment's change to this worker's tasks, at wall-clock time `at` (seconds)."""

    at: float
    active_added: tuple[int, ...]
    active_removed: tuple[int, ...]
    standby_added: tuple[int, ...]
    standby_removed: tuple[int, ...]

    def as_json(self) -> dict[str, Any]:
        return {"at": self.at, "active_added": list(self.active_added),
                "active_removed": list(self.active_removed), "standby_added": list(self.standby_added),
                "standby_removed": list(self.standby_removed)}


class AssignmentHistory:
    def __init__(self, kept: int = KEPT) -> None:
        self.changes: deque[Change] = deque(maxlen=kept)
        self._active: frozenset[int] = frozenset()
        self._standby: frozenset[int] = frozenset()

    def heard(self, active: Collection[int], standby: Collection[int], at: float) -> Change | None:
        """An assignment heard: the change it makes (kept), or None if it moved nothing."""
        active_now, standby_now = frozenset(active), frozenset(standby)
        was_active, was_standby = self._active, self._standby
        change = Change(at, _sorted(active_now - was_active), _sorted(was_active - active_now),
                        _sorted(standby_now - was_standby), _sorted(was_standby - standby_now))
        self._active, self._standby = active_now, standby_now
        if active_now == was_active and standby_now == was_standby:
            return None
        self.changes.appendleft(change)
        return change


def _sorted(numbers: frozenset[int]) -> tuple[int, ...]:
    return tuple(sorted(numbers))
