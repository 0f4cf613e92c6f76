"""The test driver: a whole worker of an app on a private in-memory broker and on virtual time, driven one
input at a time from synchronous test code (Kafka Streams' TopologyTestDriver, for engine apps).

    driver = TestDriver(app)
    driver.send(clicks, key="ada", value={"page": "/"}, timestamp_ms=1_000)
    assert driver.table("clicks-per-user")["ada"] == 1
    driver.advance(60)                          # wall-clock time: timers, crontabs, idle windows
    assert [r.value for r in driver.read(alerts)] == [...]
    driver.close()

Why a real worker and not a second, simplified engine: what a test checks must be what runs in production
(agents, group_by and through, repartition topics, joins, windows with grace and final results, the error
policy and the DLQ), and a second mechanism would drift from the first. What makes it deterministic is the
loop it runs on (engine.testing.virtual_time): time moves only in `advance`, and `send` returns when the
loop has nothing left to do at the current time, after checkpoints (changelogs, closed windows, late
records) and everything they caused in turn.
"""

from __future__ import annotations

import asyncio
import contextvars
import shutil
import tempfile
import warnings
import weakref
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agents import ServiceState
from engine.agent import Agent
from engine.clock import wall_clock
from engine.codecs import SKIP
from engine.errors import ConfigError, SchemasNotCached, WorkerFailed
from engine.events import TP
from engine.processing.runner import read_error_headers
from engine.runtime import Worker
from engine.schemas.codecs import fetch_schemas
from engine.scope import running_as
from engine.tables.versions import DELETED_VERSION
from engine.testing.virtual_time import NeverIdle, VirtualTimeLoop
from engine.topics import Topic
from engine.transport.memory_broker import MemoryBroker, MemoryRecord
from engine.windows import WindowRange

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from engine.app import App
    from engine.events import Headers
    from engine.tables.base import BaseTable

# The driver's clock starts here unless told otherwise (2026-01-01T00:00:00Z): a fixed instant, so that a
# test gives the same result on every run, whatever the day.
DEFAULT_START = 1_767_225_600.0

# Checkpoint rounds after one input: each may emit closed windows or changelog records that agents read,
# whose processing may need another. An app that still writes after this many has a cycle.
MAX_SETTLE_ROUNDS = 100

# How long a clean stop may take on the virtual clock (agents finishing, the final checkpoint).
STOP_WITHIN = 60.0


@dataclass(frozen=True, slots=True)
class Record:
    """A record as written to a topic, decoded with that topic's codecs."""

    key: Any
    value: Any
    timestamp_ms: int
    headers: Headers = ()
    partition: int = 0


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A record an agent could not process, as its DLQ holds it: the record's key and value as bytes, the
    error, and where the record came from. Bytes whatever the error: a record that does not decode has no
    other form, and one kind of value for every error keeps a test's comparisons the same for both (decode a
    letter's value with the topic's codecs, `topic.value_codec.decode(letter.value)`, where it decodes)."""

    key: bytes | None
    value: bytes | None
    error: str
    error_type: str
    topic: str
    partition: int
    offset: int


class TestDriver:
    """Run `app` deterministically for a test; see the module's docstring. `start` is the virtual clock's
    first time (seconds since the epoch, or a datetime); `settings` override the app's (the broker is always
    a private in-memory one, the stores in memory, the web server off; exactly-once is accepted and
    runs as at-least-once: on one in-process broker nothing can fail between a write and its commit)."""

    __test__ = False  # a class named Test*: not a test class for pytest

    def __init__(self, app: App, *, start: float | datetime = DEFAULT_START, **settings: Any) -> None:
        for fixed in ("broker", "processing_guarantee"):
            if fixed in settings:
                raise ConfigError(f"TestDriver: {fixed!r} cannot be set (the driver runs on its own "
                                  "in-memory broker, at-least-once)")
        begin = start.timestamp() if isinstance(start, datetime) else float(start)
        self.app = app
        self._data_dir = tempfile.mkdtemp(prefix=f"engine-driver-{app.id}-")
        broker_name = f"driver-{id(self):x}-{app.id}"
        self.broker = MemoryBroker.named(broker_name)
        overrides: dict[str, Any] = {
            "store": "memory://", "web_enabled": False, "data_dir": self._data_dir,
            # Topics in a registry format (engine.schemas) get a registry of the driver's own, in memory.
            "schema_registry_url": f"memory://{broker_name}",
            **settings,
            "broker": f"memory://{broker_name}", "processing_guarantee": "at_least_once",
        }
        self._loop = VirtualTimeLoop(begin)
        self._context = contextvars.copy_context()
        self._context.run(wall_clock.set, self._loop.wall_time)
        self.worker = Worker(app, app.settings(overrides), watch_loop=False)
        self._read_upto: dict[str, int] = {}  # records of a topic returned by `read` (appends seen)
        self._restarts_seen: dict[str, int] = {}  # agent -> its restarts already raised to the test
        self._failure_raised = False  # whether a call raised the worker's failure (or a crash) to the test
        self._closed = False
        self._spinning: NeverIdle | None = None  # the loop never became idle: nothing more can run on it
        # A driver never closed is freed when collected (or at exit), saying so, instead of leaving its
        # worker's tasks pending on a loop nobody closes (asyncio's "Task was destroyed but it is pending").
        self._abandoned = weakref.finalize(self, _free_abandoned, app.id, self._loop, self._context,
                                           self.broker, self._data_dir)
        try:
            self._run(self.worker.start())
            self._settle()
        except BaseException:
            self.close()
            raise

    # -- time ---------------------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """The virtual wall-clock time, seconds since the epoch."""
        return self._loop.wall_time()

    @property
    def steps(self) -> int:
        """How many steps the worker's loop has run so far. Moving time costs steps for what happens meanwhile
        (timers, windows closing, commits), not for how long it is: a day with nothing in it is a few."""
        return self._loop.steps

    def advance(self, seconds: float) -> None:
        """Move wall-clock time on by `seconds`: every timer, crontab, commit interval, idle window closing
        and `within=`/`timeout=` due meanwhile runs at its own time, in order, each with what it causes."""
        self._check_open()
        self._on_loop(self._loop.run_until_idle, seconds)
        self._settle()

    # -- input --------------------------------------------------------------------------------------

    def send(self, topic: Topic | Agent | str, *, key: Any = None, value: Any = None,
             timestamp_ms: int | None = None, headers: Headers | None = None,
             partition: int | None = None) -> None:
        """Write one record to `topic` (a Topic, an agent's topic, or a topic's name), encoded with its
        codecs, and return once it and everything it caused was processed. Without `timestamp_ms`, the
        record's time is the driver's clock."""
        self._check_open()
        target = self._topic(topic)
        self._run(target.send(key=key, value=value, headers=headers, partition=partition,
                              timestamp_ms=timestamp_ms))
        self._settle()

    def send_raw(self, topic: Topic | Agent | str, key: bytes | None, value: bytes | None, *,
                 timestamp_ms: int | None = None, headers: Headers | None = None,
                 partition: int | None = None) -> None:
        """Write one record of bytes as they are, past the topic's codecs, and return once it and everything
        it caused was processed: what a producer that does not speak the topic's format writes, so that a
        test can send a record that does not decode (and find it in the agent's `dlq`)."""
        self._check_open()
        name = self._topic(topic).name
        self._run(self.worker.producer.send(name, key, value, headers=headers, partition=partition,
                                            timestamp_ms=timestamp_ms))
        self._settle()

    def ask(self, agent: Agent, value: Any = None, *, key: Any = None, timeout: float = 30.0) -> Any:
        """`agent.ask(value)` from the test: the value the agent yields for it (AskTimeout once `timeout`
        seconds of virtual time passed without a reply)."""
        self._check_open()
        answer = self._run(agent.ask(value, key=key, timeout=timeout), within=timeout)
        self._settle()
        return answer

    # -- output -------------------------------------------------------------------------------------

    def read(self, topic: Topic | Agent | str) -> list[Record]:
        """The records written to `topic` since the last `read` of it, in the order they were written, decoded
        with its codecs (without engine's own records on a changelog, which agents never see either)."""
        self._check_open()
        target = self._topic(topic)
        fresh = self._unread(target.name)
        decoded = [(self._decoded(target, r), r) for r in fresh]
        return [Record(key, value, r.timestamp, r.headers, r.partition)
                for (key, value), r in decoded if key is not SKIP]

    def _decoded(self, topic: Topic, record: MemoryRecord) -> tuple[Any, Any]:
        """A record decoded with the topic's codecs, the registry's schemas it names fetched first."""
        while True:
            try:
                return topic.decode(TP(record.topic, record.partition), record)
            except SchemasNotCached as missing:
                self._run(fetch_schemas(missing, f"the driver's read of {topic.name}"))

    def dlq(self, agent: Agent | str) -> list[DeadLetter]:
        """The records `agent` dead-lettered since the last `dlq` of it, oldest first."""
        self._check_open()
        found = self.app.agents.get(agent) if isinstance(agent, str) else agent
        if found is None:
            names = ", ".join(self.app.agents)
            raise KeyError(f"no agent {agent!r} in app {self.app.id!r} (agents: {names})")
        dlq = self.worker.topology.dlq(found)
        letters = []
        for record in self._unread(dlq.name):
            origin = read_error_headers(record.headers)
            letters.append(DeadLetter(record.key, record.value, origin.error, origin.error_type, origin.topic,
                                      origin.partition, origin.offset))
        return letters

    def table(self, name: str) -> dict[Any, Any]:
        """The table's contents now (the writes of every processed record included): key -> value, for a
        windowed table (key, WindowRange) -> value, for a versioned table each key's latest value."""
        self._check_open()
        table = self.app.tables.get(name)
        if table is None:
            raise KeyError(f"no table {name!r} in app {self.app.id!r} (tables: {', '.join(self.app.tables)})")
        with running_as(self.worker):
            return dict(self._rows(table))

    # -- the end ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the worker cleanly (its final checkpoint included) and free what the driver holds."""
        if self._closed:
            return
        self._closed = True
        self._abandoned.detach()
        try:
            if self.worker.state is not ServiceState.INIT and self._spinning is None:
                self.worker.request_stop()
                self._run(self.worker.run_until_stopped(), within=STOP_WITHIN)
        except WorkerFailed:
            if not self._failure_raised:  # (it failed while stopping: nothing else would tell the test)
                raise
        finally:
            _free(self._loop, self._context, self.broker, self._data_dir)

    def __enter__(self) -> TestDriver:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- inside -------------------------------------------------------------------------------------

    def _run(self, coro: Any, within: float = 0.0) -> Any:
        async def as_worker() -> Any:
            with running_as(self.worker):
                return await coro

        return self._on_loop(self._loop.run_task, as_worker(), within=within)

    def _on_loop(self, run: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run the loop through `run`, in the driver's context (its clock); a loop that never idles is
        remembered: nothing more can run on it."""
        try:
            return self._context.run(run, *args, **kwargs)
        except NeverIdle as exc:
            self._spinning = exc
            raise

    def _settle(self) -> None:
        """Checkpoint until nothing more is written: the changelogs, closed windows and late records of the
        work done, and what agents reading them do in turn. An agent that crashed meanwhile fails the call
        (below)."""
        self._raise_failure()
        for _ in range(MAX_SETTLE_ROUNDS):
            written = self.broker.appended
            self._run(self.worker.checkpoint())
            self._raise_failure()
            if self.broker.appended == written:
                return
        raise RuntimeError(f"app {self.app.id!r} still writes after {MAX_SETTLE_ROUNDS} checkpoints in a row "
                           "without new input: a cycle between agents and tables?")

    def _raise_failure(self) -> None:
        """WorkerFailed if the worker failed, or if an agent crashed since the last call. A crash is a bug
        the test is there to find, as an exception in a Kafka Streams processor fails TopologyTestDriver's
        pipeInput: a worker restarts the agent after a backoff, which on the driver's clock comes only with
        `advance`, so its events would wait unprocessed while `send` returned and the table read empty."""
        try:
            self.worker.raise_failure()
        except WorkerFailed:
            self._failure_raised = True
            raise
        for runner in self.worker.runners:
            supervisor = runner.group.supervisor
            crash = supervisor.last_crash
            if crash is not None and supervisor.restarts > self._restarts_seen.get(runner.agent.name, 0):
                self._restarts_seen[runner.agent.name] = supervisor.restarts
                name, exc = crash
                self._failure_raised = True
                raise WorkerFailed(f"agent {runner.agent.name} crashed ({name}): {type(exc).__name__}: "
                                   f"{exc}") from exc

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this TestDriver is closed")
        if self._spinning is not None:
            raise RuntimeError(f"this TestDriver cannot go on: {self._spinning}")
        self._raise_failure()

    def _topic(self, topic: Topic | Agent | str) -> Topic:
        if isinstance(topic, Agent):
            return topic.channel
        if isinstance(topic, Topic):
            return topic
        found = self._declared(topic)
        if found is None:
            raise KeyError(f"no topic {topic!r} in app {self.app.id!r}")
        return found

    def _declared(self, name: str) -> Topic | None:
        plan = self.worker.topology.topics.get(name)
        return plan.topic if plan is not None else self.app.topics.get(name)

    def _unread(self, name: str) -> list[MemoryRecord]:
        partitions = self.broker.topics.get(name, [])
        after = self._read_upto.get(name, -1)
        fresh = sorted((r for log in partitions for r in log if r.sequence > after),
                       key=lambda r: r.sequence)
        if fresh:
            self._read_upto[name] = fresh[-1].sequence
        return fresh

    @staticmethod
    def _rows(table: BaseTable) -> Iterator[tuple[Any, Any]]:
        window = table.window
        if window is None:
            yield from table.items()
            return
        if table.key_layout == "versioned":  # each key's latest value (its versions: the table's versions())
            latest: dict[Any, tuple[int, Any]] = {}
            for (key, at), value in table.items():
                if key not in latest or at > latest[key][0]:
                    latest[key] = (at, value)
            yield from ((key, value) for key, (_, value) in latest.items() if value is not DELETED_VERSION)
            return
        size = getattr(window, "size_ms", 0)  # (a session's key has its end)
        for window_key, value in table.items():
            key, start = window_key[0], window_key[1]
            end = window_key[2] if len(window_key) == 3 else start + size
            yield (key, WindowRange.from_ms(start, end)), value



def _free_abandoned(app_id: str, loop: VirtualTimeLoop, context: contextvars.Context, broker: MemoryBroker,
                    data_dir: str) -> None:
    """What `close` frees, for a driver collected without it: its worker's tasks are cancelled (no clean
    stop: nothing may run the app's code at an arbitrary point of another test), then the loop, the broker
    and the stores' directory go."""
    warnings.warn(f"a TestDriver of app {app_id!r} was not closed: use `with TestDriver(app) as driver:`, "
                  "call driver.close(), or take the engine_driver fixture", ResourceWarning, stacklevel=1)
    _free(loop, context, broker, data_dir, cancel=not _loop_running_here(), close=not loop.is_running())


def _free(loop: VirtualTimeLoop, context: contextvars.Context, broker: MemoryBroker, data_dir: str, *,
          cancel: bool = True, close: bool = True) -> None:
    """The worker's tasks cancelled, the loop closed (each unless another loop running in this thread keeps
    it from being done now), the broker and the stores' directory gone."""
    if cancel:
        context.run(loop.cancel_all)
    if close:
        loop.close()
    MemoryBroker.forget(broker)
    shutil.rmtree(data_dir, ignore_errors=True)


def _loop_running_here() -> bool:
    """A loop runs in this thread (a collection inside an async test): another loop cannot run now."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
