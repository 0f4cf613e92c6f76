"""The state of the tasks this worker keeps without running them (Kafka Streams' standby task creation and
recycling, kept out of the task manager): standby tasks, and the state managers of tasks revoked here, kept
warm until the next assignment says what they are.

After each assignment (`settle`) the worker keeps exactly the standby tasks it names that are not active
here, their stores followed by the table manager; a warm state manager becomes a standby's if its task is
one, and closes otherwise (its stores left on disk, for the assignor to weigh). A task becoming active here
takes its state manager from here (`for_active`): a standby's recycled, or the warm one, stores open, so
only the tail of each changelog is replayed.

Both open (and a settle closes) stores off the event loop, so the tasks that keep running go on meanwhile;
one task's at a time: a settle and a task becoming active never open the same task's stores twice nor one
being closed, and none is added once the worker stops (`close`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from engine.tables.state import StateManager
from engine.tasks.standby import StandbyTask

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable

    from engine.stores import PartitionStore
    from engine.tables.base import BaseTable
    from engine.tables.manager import TableManager

log = logging.getLogger(__name__)


class Standbys:
    """The standby tasks here and the warm state managers, over the worker's table manager."""

    def __init__(self, tables: TableManager) -> None:
        self.tables = tables
        self.tasks: dict[int, StandbyTask] = {}
        # Tasks closed clean here (revoked), their stores kept open and followed until the next assignment
        # says whether they are active, standby, or neither here.
        self.warm: dict[int, StateManager] = {}
        self._changing = asyncio.Lock()  # a settle or a task becoming active, with the stores it opens
        self._closed = False

    async def for_active(self, number: int) -> StateManager:
        """The state manager of task `number` becoming active here, its stores open: a standby's recycled,
        the one it had before its last revoke here, or a new one. The stores it does not have open yet are
        opened off the event loop (the tasks that keep running here go on meanwhile)."""
        async with self._changing:
            standby = self.tasks.pop(number, None)
            if standby is not None:
                log.info("standby task %d becomes active here: its stores replay only the tail", number)
                state = standby.close()
            else:
                state = self._kept_or_new(number)
            await state.open_off_loop(self.tables.task_partitions(number))
            return state

    def released(self, number: int, state: StateManager) -> None:
        """Task `number` closed clean here: its stores stay open and followed until the next assignment says
        what it is (those of tables over a source topic close: only its active task applies that topic)."""
        state.close_sources()
        self.warm[number] = state
        self.tables.follow(state)

    async def settle(self, wanted: Callable[[], Collection[int]], active: Callable[[], Collection[int]],
                     active_states: Callable[[], Iterable[StateManager]]) -> None:
        """After an assignment: exactly the standby tasks `wanted` but those active here, their stores
        followed; the warm state managers of tasks neither active nor standby here closed; stores on disk
        of no task here cleaned up once old enough. `wanted` (the last assignment's standbys), `active`
        and `active_states` (the active tasks' numbers and state managers) are asked at each step: tasks
        and assignments change meanwhile, and two settles under way both go where the last one says.

        One task at a time holds the lock, so a task becoming active waits for one store's open or close at
        most, not for the whole settle; and a standby whose task became active meanwhile is kept warm, for
        `for_active` to recycle, never closed and opened again."""
        for number in sorted({*self.tasks, *wanted(), *self.warm}):
            async with self._changing:
                if self._closed:
                    return
                await self._settle_one(number, number in wanted(), number in active(), active)
        kept = [*active_states(), *(state for _, state in self.states())]
        self.tables.clean_up({tp for state in kept for tp in state.stores})

    async def _settle_one(self, number: int, wanted: bool, active: bool,
                          now_active: Callable[[], Collection[int]]) -> None:
        """Task `number` as the last assignment says (`wanted` as a standby) and the active tasks (`active`
        among them): a standby kept, dropped (kept warm if its task is active now, closed otherwise) or
        opened; a warm state manager of a task neither active nor standby here closed."""
        if number in self.tasks:
            if wanted and not active:
                return
            state = self.tasks.pop(number).close()
            if active:
                self.warm[number] = state  # (still followed: as a revoked task's is)
            else:
                await state.close_off_loop()
        elif wanted and not active:
            await self._open_standby(number, now_active)
        elif number in self.warm and not active:
            await self.warm.pop(number).close_off_loop()

    async def _open_standby(self, number: int, active: Callable[[], Collection[int]]) -> None:
        """Standby task `number` here, its stores opened off the loop and followed (kept warm instead if
        the task became active meanwhile; closed if the worker stopped)."""
        tables = self.tables
        state = self._kept_or_new(number)
        try:
            await state.open_off_loop([(table, n) for table, n in tables.task_partitions(number)
                                       if table.has_own_changelog])
        except BaseException:
            state.close()
            raise
        if self._closed:
            state.close()
            return
        tables.follow(state)
        if number in active():
            self.warm[number] = state
            return
        standby = self.tasks[number] = StandbyTask(number, state)
        standby.start()

    def states(self) -> list[tuple[int, StateManager]]:
        """The standby tasks' state managers and the warm ones, each with its task's number."""
        return [*((n, standby.state_manager) for n, standby in self.tasks.items()), *self.warm.items()]

    def positions(self, active: Iterable[tuple[int, StateManager]]) -> dict[int, int]:
        """Per task this worker has stores of (open: `active`, standby or kept warm; or kept on disk): how far
        they have read their changelogs, summed over the tables (what the assignor compares to find who is
        caught up)."""
        positions = self.tables.kept_positions()
        for number, state in [*active, *self.states()]:
            positions[number] = positions.get(number, 0) + state.position()
        return positions

    def store(self, table: BaseTable, number: int) -> PartitionStore | None:
        """The store of a table partition this worker keeps current without owning it, or None: what
        `?stale=ok` queries read."""
        standby = self.tasks.get(number)
        state = standby.state_manager if standby is not None else self.warm.get(number)
        return state.store(table, number) if state is not None and table.has_own_changelog else None

    def close(self) -> None:
        """The worker stops: every standby task and warm state manager closes, stores left on disk; a settle
        under way stops at its next step (closing what it was opening)."""
        self._closed = True
        states = [standby.close() for standby in self.tasks.values()]
        self.tasks.clear()
        for state in [*states, *self.warm.values()]:
            state.close()
        self.warm.clear()

    def _kept_or_new(self, number: int) -> StateManager:
        warm = self.warm.pop(number, None)
        return warm if warm is not None else StateManager(f"task {number}", self.tables)
