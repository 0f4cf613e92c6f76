"""Agents as declared on the App: a function, the topic it reads, concurrency, sinks and an error policy.

What is an agent? An async function that takes a stream and processes it one event at a time. It runs as
`concurrency` supervised instances; events of one partition always go to the same instance, so order per
partition (and so per key) is kept. An async generator agent `yield`s results, which go to its sinks and,
for events sent with `ask`, back to the asker.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from engine.errors import AskTimeout, ConfigError, NotRunning
from engine.scope import PerWorker
from engine.settings import ERROR_POLICIES, ErrorPolicy

if TYPE_CHECKING:
    from collections.abc import Awaitable, Sequence
    from contextlib import AbstractContextManager

    from engine.streams.stream import AgentFun
    from engine.topics import Topic

REPLY_TO = "engine-reply-to"
CORRELATION_ID = "engine-correlation-id"

Sink = Any  # a Topic, an Agent, or a callable (sync or async) taking the yielded value


class Replies(Protocol):
    """How asks are sent and answered, and where they wait: provided by the worker
    (engine.processing.replies)."""

    topic: str

    def expect(self, correlation_id: str) -> asyncio.Future[Any]: ...

    def forget(self, correlation_id: str) -> None: ...

    async def request(self, channel: Topic, key: Any, value: Any, correlation_id: str) -> None: ...

    async def reply(self, reply_to: str, correlation_id: bytes, value: bytes | None) -> None: ...

    def asking(self) -> AbstractContextManager[None]: ...


class Agent:
    def __init__(
        self,
        fun: AgentFun,
        *,
        name: str,
        channel: Topic,
        concurrency: int = 1,
        sink: Sequence[Sink] = (),
        on_error: ErrorPolicy | None = None,
    ) -> None:
        if not (inspect.iscoroutinefunction(fun) or inspect.isasyncgenfunction(fun)):
            raise ConfigError(f"agent {name!r} must be an `async def` function taking a stream")
        if not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"agent {name!r}: concurrency must be an integer >= 1, not {concurrency!r}")
        if on_error is not None and on_error not in ERROR_POLICIES:
            raise ConfigError(f"agent {name!r}: on_error must be one of {ERROR_POLICIES}, not {on_error!r}")
        for s in sink:
            if not (hasattr(s, "send") or callable(s)):
                raise ConfigError(f"agent {name!r}: sink {s!r} is not a topic, an agent or a callable")
        self.fun = fun
        self.name = name
        self.channel = channel
        self.concurrency = concurrency
        self.sinks = list(sink)
        self.on_error = on_error
        self.is_generator = inspect.isasyncgenfunction(fun)
        self._replies_by_worker: PerWorker[Replies] = PerWorker()

    @property
    def dlq_suffix(self) -> str:
        return f"{self.name}-dlq"

    def attach(self, replies: Replies | None, owner: object = None) -> None:
        """Called by a worker (`owner`): asks go through its replies (None detaches it)."""
        if replies is None:
            self._replies_by_worker.unbind(owner)
        else:
            self._replies_by_worker.bind(owner, replies)

    @property
    def replies(self) -> Replies | None:
        """The replies of the worker the running code belongs to (the first one's outside every worker)."""
        return self._replies_by_worker.current()

    def send(self, value: Any = None, *, key: Any = None) -> Awaitable[asyncio.Future[object]]:
        """Send `value` to this agent's topic (fire and forget once awaited)."""
        return self.channel.send(key=key, value=value)

    async def ask(self, value: Any = None, *, key: Any = None, timeout: float = 30.0) -> Any:
        """Send `value` to this agent and wait for the value it yields for it."""
        replies = self._replies_by_worker.current()
        if replies is None:
            raise NotRunning(f"agent {self.name!r}: ask needs a running worker")
        correlation_id = uuid.uuid4().hex
        future = replies.expect(correlation_id)
        try:
            with replies.asking():
                await replies.request(self.channel, key, value, correlation_id)
                async with asyncio.timeout(timeout):
                    return await future
        except TimeoutError:
            raise AskTimeout(f"agent {self.name!r} did not reply within {timeout:g}s") from None
        finally:
            replies.forget(correlation_id)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fun(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Agent {self.name!r} on {self.channel.name!r} x{self.concurrency}>"

