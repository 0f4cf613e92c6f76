"""The stuck-event watchdog: names an agent that has been inside one event for too long, and a task that
has work waiting yet does not move.

A slow or stuck agent holds back only its own partitions (the conductor pauses a partition whose mailbox is
full and keeps fetching the rest), so without a word from someone it would stall them silently. Nothing is
added to the per-event path: every few seconds the watchdog samples the event each agent instance is inside;
one found inside the same event for longer than `stuck_event_warning` is logged with the agent, topic,
partition and offset, and with where it waits (the agent's line and the coroutines it awaits through:
engine.stacks), then again, without the stack, each time that long passes while it stays stuck. Likewise a
task whose partitions have records waiting (buffered, in flight, or on the broker) but did not move for three
times that long is logged with where each of its partitions stands and why it may wait (paused, parked,
ordering): a stall always says what is stalled.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from agents import Service
from engine.activity import Activity

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from engine.events import Event
    from engine.fetch.stalls import TaskState

    TaskStates = Callable[[], Awaitable[dict[int, TaskState]]]
    WaitingAt = Callable[[Event], list[str] | None]

STALL_FACTOR = 3  # a task stalls after this many times the stuck-event threshold without moving

log = logging.getLogger(__name__)


class Watchdog(Service):
    def __init__(
        self,
        busy: Callable[[], list[tuple[str, Event]]],
        threshold: float,
        *,
        tasks: TaskStates | None = None,
        waiting_at: WaitingAt | None = None,
        clock: Callable[[], float] = time.monotonic,
        activity: Activity | None = None,
        fetching: Callable[[], bool] | None = None,
    ) -> None:
        """`activity`: the worker's (engine.activity): with no agent inside an event and no task waiting,
        the watchdog looks again only after the next records fetched or timer run, unless `fetching()`
        says a fetcher could stop unseen (a broker's: its stopping brings no activity). `waiting_at`:
        where the agent inside an event waits (traceback lines), for the first warning about it."""
        super().__init__("watchdog")
        self._activity = activity if activity is not None else Activity()
        self._busy = busy
        self._task_states = tasks
        self._waiting_at = waiting_at
        # task -> (token, unchanged since, warn at)
        self._unmoved: dict[int, tuple[object, float, float]] = {}
        self.threshold = threshold
        self._clock = clock
        # id(event) -> (event, its agent, first seen, warn at)
        self._since: dict[int, tuple[Event, str, float, float]] = {}
        self._waiting = False  # whether the last look found a task with records waiting
        self._fetching = fetching

    async def on_start(self) -> None:
        self.spawn(self._watch(), "watch")

    async def _watch(self) -> None:
        rounds = self._activity.rounds(min(self.threshold / 2, 5.0))
        idle = False
        while True:
            await rounds.next(idle=idle)
            for message in self.sample():
                log.warning("%s", message)
            if self._task_states is not None:
                for message in self.stalls(await self._task_states()):
                    log.warning("%s", message)
            # Nothing to watch until something happens (but a fetcher that stops makes nothing happen).
            idle = not self._since and not self._waiting and not (self._fetching and self._fetching())

    def stalls(self, states: dict[int, TaskState]) -> list[str]:
        """The warnings due now for tasks with work waiting that did not move (`states`: Conductor's)."""
        now, limit = self._clock(), self.threshold * STALL_FACTOR
        unmoved: dict[int, tuple[object, float, float]] = {}
        messages = []
        for number, state in states.items():
            token, waiting = state.token, state.waiting
            entry = self._unmoved.get(number)
            if entry is None or entry[0] != token or not waiting:
                entry = (token, now, now + limit)
            _, since, due = entry
            if waiting and now >= due:
                due = now + limit
                messages.append(f"task {number} has not moved for {now - since:.0f}s with records waiting: "
                                f"{state.where}")
            unmoved[number] = (token, since, due)
        self._unmoved = unmoved
        self._waiting = any(state.waiting for state in states.values())
        return messages

    def sample(self) -> list[str]:
        """Look once; returns the warnings due now (one per stuck event, repeated every `threshold`)."""
        now = self._clock()
        seen: dict[int, tuple[Event, str, float, float]] = {}
        messages = []
        for agent, event in self._busy():
            entry = self._since.get(id(event))
            if entry is None or entry[0] is not event:  # new (or an id reused by a new event)
                entry = (event, agent, now, now + self.threshold)
            _, _, first, due = entry
            if now >= due:
                message = (f"agent {agent} has been processing {event.topic}[{event.partition}]@"
                           f"{event.offset} for {now - first:.0f}s; the partitions it serves wait behind it "
                           "(the others keep flowing)")
                first_warning = due == first + self.threshold
                stack = self._waiting_at(event) if self._waiting_at is not None and first_warning else None
                if stack:
                    message += "; it waits at (innermost last):\n" + "".join(stack).rstrip("\n")
                messages.append(message)
                due = now + self.threshold
            seen[id(event)] = (event, agent, first, due)
        self._since = seen
        return messages

    def stuck(self) -> list[tuple[str, Event, float]]:
        """The agents found inside one event for longer than the threshold at the last look: (agent, the
        event, seconds inside it), for the worker's page."""
        now = self._clock()
        return [(agent, event, now - first) for event, agent, first, _ in self._since.values()
                if now - first >= self.threshold]

    def unmoved(self, states: dict[int, TaskState]) -> dict[int, float]:
        """Of the tasks in `states` (as they are now) with work waiting, those that have not moved since the
        watchdog's last look (the same token), and for how long they have not: a task that moves is not
        in it, however much waits."""
        now = self._clock()
        found = {}
        for number, state in states.items():
            seen = self._unmoved.get(number)
            if state.waiting and seen is not None and seen[0] == state.token and now > seen[1]:
                found[number] = now - seen[1]
        return found
