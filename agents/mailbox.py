"""A bounded, closable mailbox: the only way messages reach an actor.

Why not asyncio.Queue: we need `put_many` (the fetcher hands over a whole partition batch in one step),
`close` with precise semantics (getters drain what is left, then see MailboxClosed; putters fail at once),
and `purge` (drop queued messages of a revoked partition). The bound gives backpressure: a producer awaits
while the mailbox holds `maxsize` or more messages, so a slow actor slows whoever feeds it and memory stays
bounded (by `maxsize` plus one batch). A feeder that must not block (one fetch loop feeding many mailboxes)
checks `full()`, hands over with `put_many_nowait`, and parks what does not fit until `room()`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Generic, TypeVar

from agents.errors import MailboxClosed

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

T = TypeVar("T")


class Mailbox(Generic[T]):
    __slots__ = ("_closed", "_getters", "_items", "_putters", "maxsize")

    def __init__(self, maxsize: int = 1000) -> None:
        if maxsize < 1:
            raise ValueError(f"mailbox maxsize must be at least 1, not {maxsize}")
        self.maxsize = maxsize
        self._items: deque[T] = deque()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._putters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def closed(self) -> bool:
        return self._closed

    def full(self) -> bool:
        return len(self._items) >= self.maxsize

    async def put(self, item: T) -> None:
        await self._wait_for_room()
        self._items.append(item)
        self._wake(self._getters)

    async def put_many(self, items: Iterable[T]) -> None:
        """Wait for room, then enqueue all of `items` at once (the bound may be passed by one batch)."""
        await self._wait_for_room()
        self._items.extend(items)
        self._wake(self._getters)

    def put_many_nowait(self, items: Iterable[T]) -> None:
        """Enqueue all of `items` now, whatever the bound (the caller checked `full()` first)."""
        if self._closed:
            raise MailboxClosed("mailbox is closed")
        self._items.extend(items)
        self._wake(self._getters)

    async def room(self) -> None:
        """Wait until the mailbox is below its bound; MailboxClosed if it is closed."""
        await self._wait_for_room()

    async def get(self) -> T:
        items = self._items
        while not items:
            if self._closed:
                raise MailboxClosed("mailbox is closed")
            waiter = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if not waiter.done():
                    self._getters.remove(waiter)
                elif items:
                    self._wake(self._getters)  # pass on a wake-up we can no longer use
                raise
        item = items.popleft()
        if items and self._getters:
            self._wake(self._getters)
        if self._putters and len(items) < self.maxsize:
            self._wake(self._putters)
        return item

    def get_nowait(self) -> T | None:
        """The next message, or None when empty: the fast path of a busy stream."""
        items = self._items
        if not items:
            return None
        item = items.popleft()
        if self._putters and len(items) < self.maxsize:
            self._wake(self._putters)
        return item

    def take_all_nowait(self) -> list[T]:
        """Every message waiting, oldest first (none when empty): what a consumer that processes a batch
        at a time takes in one step (engine.fused)."""
        items = self._items
        if not items:
            return []
        taken = list(items)
        items.clear()
        while self._putters:  # all the room is free: every waiting putter may go on
            self._wake(self._putters)
        return taken

    def requeue(self, items: list[T]) -> None:
        """Put `items` back at the front, in order: work a crashed consumer took but never finished."""
        if items:
            self._items.extendleft(reversed(items))
            self._wake(self._getters)

    def purge(self, predicate: Callable[[T], bool]) -> int:
        """Drop queued messages matching `predicate`; returns how many were dropped."""
        kept = [item for item in self._items if not predicate(item)]
        dropped = len(self._items) - len(kept)
        if dropped:
            self._items = deque(kept)
            self._wake(self._putters)
        return dropped

    def close(self, *, drop_pending: bool = False) -> int:
        """Refuse new messages; getters drain what is left unless `drop_pending`. Returns dropped count."""
        self._closed = True
        dropped = 0
        if drop_pending:
            dropped = len(self._items)
            self._items.clear()
        for waiters in (self._getters, self._putters):
            while waiters:
                waiter = waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)
        return dropped

    async def _wait_for_room(self) -> None:
        while True:
            if self._closed:
                raise MailboxClosed("mailbox is closed")
            if len(self._items) < self.maxsize:
                return
            waiter = asyncio.get_running_loop().create_future()
            self._putters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if not waiter.done():
                    self._putters.remove(waiter)
                elif len(self._items) < self.maxsize:
                    self._wake(self._putters)
                raise

    @staticmethod
    def _wake(waiters: deque[asyncio.Future[None]]) -> None:
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def __aiter__(self) -> Mailbox[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.get()
        except MailboxClosed:
            raise StopAsyncIteration from None
