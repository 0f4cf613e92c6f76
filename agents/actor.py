"""Actors: N concurrent instances of one behaviour, each with a bounded mailbox, under a supervisor.

A behaviour is `async def behaviour(mailbox)`: it takes messages from its own mailbox until the mailbox is
closed. The mailbox outlives a crash, so a restarted instance resumes with the messages still queued.
`tell` puts a message (waiting while the mailbox is full). (engine's agents ask each other through Kafka,
engine.processing.replies: an answer must survive a worker and cross workers.)
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Generic, TypeVar

from agents.mailbox import Mailbox
from agents.service import Service
from agents.supervisor import RestartPolicy, Supervisor

M = TypeVar("M")
Behaviour = Callable[[Mailbox[M]], Awaitable[None]]


class ActorGroup(Service, Generic[M]):
    """`concurrency` instances of `behaviour`, supervised one-for-one."""

    def __init__(
        self,
        name: str,
        behaviour: Behaviour[M],
        *,
        concurrency: int = 1,
        mailbox_size: int = 1000,
        policy: RestartPolicy | None = None,
        shutdown_timeout: timedelta = timedelta(seconds=10),
        drop_pending_on_stop: bool = False,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"actor {name!r}: concurrency must be at least 1, not {concurrency}")
        super().__init__(name)
        self.behaviour = behaviour
        self.concurrency = concurrency
        self.mailboxes: list[Mailbox[M]] = [Mailbox(mailbox_size) for _ in range(concurrency)]
        self.supervisor = self.add_child(Supervisor(f"{name}.supervisor", policy))
        self.shutdown_timeout = shutdown_timeout
        self.drop_pending_on_stop = drop_pending_on_stop
        self._round_robin = itertools.cycle(range(concurrency))
        for index, mailbox in enumerate(self.mailboxes):
            self.supervisor.supervise(f"{name}[{index}]", self._instance(mailbox))

    def _instance(self, mailbox: Mailbox[M]) -> Callable[[], Awaitable[None]]:
        return lambda: self.behaviour(mailbox)

    def mailbox_for(self, instance: int | None) -> Mailbox[M]:
        index = next(self._round_robin) if instance is None else instance % self.concurrency
        return self.mailboxes[index]

    async def tell(self, message: M, *, instance: int | None = None) -> None:
        await self.mailbox_for(instance).put(message)

    async def on_stop(self) -> None:
        """Close the mailboxes, then give the instances `shutdown_timeout` to finish what they hold."""
        for mailbox in self.mailboxes:
            mailbox.close(drop_pending=self.drop_pending_on_stop)
        await self.supervisor.wait_children(self.shutdown_timeout.total_seconds())
