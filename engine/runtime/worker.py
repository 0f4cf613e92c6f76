"""The worker: the one composition root. Builds transport clients, runners and services from an App and
its Settings, wires them together (dependencies passed in, nothing reaches back to the app), and runs them.

Start order: producer, replies, agents, timers, the task manager, then the conductor (so nothing is fetched
before agents can take it). Stop order: stop fetching, stop timers and agents (in-flight events finish,
queued ones are dropped uncommitted), final checkpoint and every task closed, leave the group, stop the
producers.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from agents import Service
from engine.activity import Activity
from engine.assignor import Placement
from engine.commit.guarantee import choose
from engine.errors import WorkerFailed
from engine.events import TP
from engine.fetch.conductor import Conductor
from engine.loops import running_loop_name
from engine.monitors.loopwatch import LoopMonitor
from engine.monitors.watchdog import Watchdog
from engine.operations.schemas import connect_schemas
from engine.processing.replies import ReplyService
from engine.processing.runner import AgentRunner
from engine.runtime.data_dir import check_data_dir, worker_identity
from engine.runtime.overview import PageSource
from engine.runtime.status import worker_status
from engine.scope import running_as
from engine.tables.grace_joins import GraceJoin, grace_join
from engine.tables.manager import TableManager
from engine.tables.stream_joins import StreamJoin, as_how, stream_join
from engine.tasks.inputs import InputPlan
from engine.tasks.leases import Leases
from engine.tasks.manager import REVOKE_WAIT, TaskManager
from engine.tasks.pauses import Pauses
from engine.tasks.poison import PoisonRecords
from engine.tasks.purge import RepartitionPurge
from engine.tasks.release import ORDERING
from engine.timers import timer_supervisor
from engine.topics import planned_partitions
from engine.topology.declaration import internal_topic
from engine.topology.plan import build_topology
from engine.transport import ClientTuning, Producer, transport_for
from engine.transport.base import GroupTopology, TopicSpec
from engine.transport.traced import TracedProducer
from engine.windows import JoinWindows

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from engine.app import App
    from engine.schedule import Timer
    from engine.schemas.registry import Registry
    from engine.settings import Settings
    from engine.tasks.active import ActiveTask
    from engine.topics import Topic
    from engine.tracing import Tracing
    from engine.web.server import WebServer
    from engine.windows import Seconds

log = logging.getLogger(__name__)


class _ProducerService(Service):
    def __init__(self, producer: Producer) -> None:
        super().__init__("producer")
        self.producer = producer

    async def on_start(self) -> None:
        await self.producer.start()

    async def on_stop(self) -> None:
        await self.producer.stop()


def _tracing(settings: Settings) -> Tracing | None:
    """The worker's tracing, if its settings ask for it (OpenTelemetry is imported only then)."""
    if not settings.tracing:
        return None
    from engine.tracing import Tracing

    return Tracing(settings.app_id)


def _traced(producer: Producer, tracing: Tracing | None) -> Producer:
    """`producer`, writing the current trace context into what it sends when the worker traces."""
    return producer if tracing is None else TracedProducer(producer, tracing)


class Worker(Service):
    def __init__(self, app: App, settings: Settings, *, watch_loop: bool = True) -> None:
        """`watch_loop`: whether a thread watches for a blocked event loop (engine.monitors.loopwatch); not
        on a loop whose time is virtual (the test driver), where the real time it measures means nothing."""
        super().__init__(f"worker:{app.id}")
        self.app = app
        self.settings = settings
        self._registry: Registry | None = None  # the schema registry, if topics are declared in its formats
        check_data_dir(settings)
        self.topology = build_topology(app, settings)
        self.transport = transport_for(settings, ClientTuning(
            linger=settings.producer_linger.total_seconds(),
            session_timeout=settings.session_timeout.total_seconds(),
            max_poll_interval=settings.max_poll_interval.total_seconds(),
            transaction_timeout=settings.transaction_timeout.total_seconds(),
            fetch_batches=settings.fetch_batches))
        # The tasks active here: kept by the task manager, read by the conductor (whose task a batch is) and
        # by the guarantee (whose transaction an event's sends go to).
        active: dict[int, ActiveTask] = {}
        self.guarantee = choose(settings.processing_guarantee, self.transport, app.id,
                                tables=bool(app.tables), worker_id=lambda: worker_identity(settings),
                                tasks=active)
        self.tracing = tracing = _tracing(settings)
        # What agents, timers and asks send with: each record carries the trace context it was sent in.
        self.producer = _traced(self.guarantee.producer, tracing)
        for producer in self.guarantee.producers:
            self.add_child(_ProducerService(producer))
        self.replies = self.add_child(ReplyService(self.transport, self.topology.replies.name,
                                                   _traced(self.guarantee.ask_producer, tracing),
                                                   self.guarantee.quiesce))
        # The group's callbacks reach the task manager, made below with the consumer it reads from: they are
        # the one place the worker's parts call each other in a circle (Kafka Streams' rebalance listener).
        self.placement = Placement(
            standby_replicas=settings.standby_replicas,
            acceptable_lag=settings.acceptable_recovery_lag,
            stateful=any(not t.is_global for t in app.tables.values()),
            positions=lambda: self.tasks.positions(),
            on_assignment=lambda assignment: self.tasks.on_assignment(assignment),
            ask_to_beat=_ask_to_beat if settings.web_enabled else None,
        )
        instance = settings.group_instance_id
        self.consumer = self.transport.consumer(
            group_id=settings.app_id,
            instance_id=worker_identity(settings) if instance == "auto" else instance,
            on_assigned=lambda tps: self.tasks.assigned(tps),
            on_revoked=lambda tps: self.tasks.revoked(tps),
            on_lost=lambda tps: self.tasks.lost(tps),
            max_poll_records=settings.max_poll_records,
            auto_offset_reset=settings.auto_offset_reset,
            placement=self.placement,
            group_protocol=settings.group_protocol,
            group_topology=self._group_topology,
        )
        tables = self.tables = self.add_child(TableManager(
            app.tables.values(), transport=self.transport, settings=settings,
            admin_factory=self.transport.admin, request_rebalance=self.consumer.request_rebalance,
        )) if app.tables else None
        self.page = PageSource(self)  # what the app's page shows of this worker (engine.runtime.overview)
        self.web: WebServer | None = None  # imported only by a worker that serves
        if settings.web_enabled:  # started before the consumer joins: its address goes into the assignment
            self.web = self.add_child(self._web_server())
        # Topics whose events write windowed tables on their topic's time: the conductor records, per batch,
        # the largest event time of these topics' partitions (the tables add them at their first write).
        self.timed_topics: set[str] = set()
        leases = Leases()
        # What wakes the periodic services from their sleep while they have nothing to do (engine.activity).
        activity = Activity()
        pauses = Pauses(self.consumer, keep_fetched=[ORDERING])  # (its records are wanted again soon)
        inputs = InputPlan(
            table_sources=frozenset(t.changelog_topic.name for t in app.tables.values()
                                    if not t.is_global and not t.has_own_changelog),
            joined_streams=frozenset(self.topology.ordered()),
            serial=frozenset(self.topology.serial),
            max_idle=settings.max_task_idle.total_seconds(),
        )
        poison = PoisonRecords(settings.poison_after_losses)
        self.conductor = Conductor(
            self.consumer, leases=leases, pauses=pauses, max_poll_records=settings.max_poll_records,
            admin_factory=self.transport.admin, quiesce=self.guarantee.quiesce, poison=poison,
            timed_topics=self.timed_topics, tasks=active,
            plan=lambda topic: self.topology.declare_late(topic, "source").spec,
            inputs=inputs, activity=activity,
        )
        self.tasks = TaskManager(
            leases=leases, consumer=self.consumer, pauses=pauses, guarantee=self.guarantee, tables=tables,
            drop_queued=self.conductor.dispatcher.drop_queued,
            commit_interval=settings.commit_interval.total_seconds(),
            revoke_wait=min(settings.shutdown_timeout.total_seconds(), REVOKE_WAIT),
            reset_to_end=settings.auto_offset_reset == "latest", poison=poison,
            inputs=inputs,
            active=active, on_settled=self._settled,
            transaction_timeout=(settings.transaction_timeout.total_seconds()
                                 if settings.processing_guarantee == "exactly_once" else None),
            activity=activity,
            tracing=tracing,
        )
        self._said_ready = False
        self._counts: dict[str, int] = {}  # every topic's partitions on the broker, known once started
        topics = self.topology.topics
        self.runners = [
            self.add_child(AgentRunner(
                agent, settings=settings, producer=self.producer,
                subscribe=self.conductor.add_route, internal_topic=self._internal_topic,
                dlq=self.topology.dlq(agent), quiesce=self.guarantee.quiesce,
                reads=[topics[name].topic for name in self.topology.reads[agent.name][1:]
                       if name not in self.topology.merged.get(agent.name, ())],
                merged=[topics[name].topic for name in self.topology.merged.get(agent.name, ())],
                join_factory=self._stream_join, grace_join_factory=self._grace_join, tracing=tracing,
            ))
            for agent in app.agents.values()
        ]
        for runner in self.runners:
            self.conductor.add_route(runner.agent.channel, runner)
        timers = [*app.timers.values(), *self._export_timers()]
        self.timers = self.add_child(timer_supervisor(timers, settings, is_leader=self._is_leader,
                                                        activity=activity))
        self.add_child(self.tasks)
        self.add_child(self.conductor)
        dispatcher = self.conductor.dispatcher
        self.watchdog = self.add_child(Watchdog(
            dispatcher.busy_events, settings.stuck_event_warning.total_seconds(),
            tasks=self.conductor.task_states, waiting_at=dispatcher.waiting_at, activity=activity,
            fetching=self.conductor.fetching))
        self.purge = self.add_child(RepartitionPurge(
            active, [p.name for p in self.topology.topics.values() if p.role == "repartition"],
            self.transport.admin, settings.repartition_purge_interval.total_seconds(), activity))
        self.loop_monitor = self.add_child(LoopMonitor(
            dispatcher.busy_events, settings.blocked_loop_warning.total_seconds(),
            blocked=lambda agent, event, seconds: poison.suspect(TP(event.topic, event.partition),
                                                                 event.offset, agent, seconds),
        )) if watch_loop else None
        self._stopping = asyncio.Event()

    def _web_server(self) -> WebServer:
        """The worker's web server (engine.web): aiohttp and the export's modules are imported only by a
        worker that serves."""
        from engine.export.schedule import AskedExports
        from engine.web.queries import TableQueries
        from engine.web.server import PageData, WebServer

        queries = TableQueries(self, self.app.tables, owners=self._owners, assigned=self.assigned,
                               endpoint=lambda: self.placement.endpoint,
                               standby=lambda table, number: self.tasks.standby_store(table, number),
                               standbys=lambda: self.tasks.standby, workers=self.placement.workers)
        return WebServer(self.app.id, queries, self.settings.web_host, self.settings.web_port,
                         on_bound=self._web_bound, metrics=self.metrics, status=self.status,
                         exports=AskedExports(self.app), on_beat_asked=lambda: self.placement.beat_now(),
                         page=PageData(self.page.overview, self.page.graph))

    def _export_timers(self) -> list[Timer]:
        """The timers of the app's scheduled exports (`app.export`)."""
        if not self.app.exports:
            return []
        from engine.export.schedule import scheduled_export  # (the export's libraries only when used)

        return [scheduled_export(self.app, export) for export in self.app.exports.values()]

    def _is_leader(self) -> bool:
        """The group's leader for `on_leader` timers: the worker that owns task 0, set up and not moving
        (one worker at a time: a task is revoked from its owner before it is given to the next)."""
        return self.assigned().get(0, False)

    async def metrics(self) -> bytes:
        """The worker's metrics in Prometheus' text format (`GET /metrics`)."""
        from engine.monitors.metrics import render
        from engine.monitors.readings import worker_families

        return render(await worker_families(self))

    async def status(self) -> dict[str, Any]:
        """What this worker holds now (`GET /status`, engine status: engine.runtime.status)."""
        return await worker_status(self)


    def _settled(self) -> None:
        """Say once, at INFO, that the worker is ready: every partition assigned to it set up."""
        assigned = self.assigned()
        if self._said_ready or not all(assigned.values()):
            return
        self._said_ready = True
        web = f"http://{self.placement.endpoint}" if self.placement.endpoint else "no web server"
        assignment = self.tasks.assignment  # (its standbys: their stores may still be opening)
        standby = len(assignment.standby) if assignment is not None else len(self.tasks.standby)
        log.info("worker %s ready: %d partitions active (%s), %d standby; %s; %s group protocol", self.app.id,
                 len(assigned), ",".join(map(str, sorted(assigned))) or "none", standby, web,
                 self.consumer.group_protocol or "no")

    @property
    def web_endpoint(self) -> str | None:
        """`host:port` the worker's web server listens on, once started: the port it took with
        `web_port=0`, or the next free one after a taken `web_port`; None without a web server."""
        return self.placement.endpoint or None

    def _web_bound(self, endpoint: str) -> None:
        self.placement.endpoint = endpoint

    def _owners(self) -> Mapping[int, str]:
        current = self.placement.current
        return current.owners if current is not None else {}

    def assigned(self) -> dict[int, bool]:
        """The tasks active here, and whether each is set up (its stores recovered)."""
        return {number: task.ready for number, task in self.tasks.active.items() if not task.closed}

    def _stream_join(self, agent: str, number: int, topic: Topic, other: Topic, within: Seconds,
                     grace: Seconds, how: str) -> StreamJoin:
        """An agent's stream-stream join, over the buffer tables its declaration declared."""
        return stream_join(self.app, agent, number, topic, other, JoinWindows(within, grace), as_how(how),
                           declaring=False)

    def _grace_join(self, agent: str, number: int, topic: Topic, table: Any, grace: Seconds, how: str
                    ) -> GraceJoin:
        """An agent's join with a versioned table's grace, over the buffer table its declaration declared."""
        return grace_join(self.app, agent, number, topic, table, grace, how, declaring=False)

    def _internal_topic(self, name: str, like: Topic | None, key_type: type | None = None,
                        value_type: type | None = None) -> Topic:
        """A pipeline's internal topic, as the topology has it (or adds it: an agent that awaited before
        iterating declares its pipeline only now), attached for sending."""
        plan = self.topology.topics.get(f"{self.app.id}-{name}")
        if plan is None:
            plan = self.topology.declare_late(
                internal_topic(self.app.id, name, like, key_type, value_type), "repartition")
        plan.topic.attach(self.producer, self)
        return plan.topic

    def all_topics(self) -> list[Topic]:
        return [plan.topic for plan in self.topology.topics.values()]

    async def on_start(self) -> None:
        admin = self.transport.admin()
        try:
            existing = await admin.describe_topics()
            self.topology.resolve(existing)  # the internal topics to create follow the topics that write them
            sources = [p.name for p in self.topology.topics.values() if p.role == "table-source"]
            present = [name for name in sources if name in existing]
            self.topology.check(existing, await admin.topic_configs(present) if present else {})  # first
            counts = await admin.create_topics(self.topology.specs())
            self.topology.check(counts, await admin.topic_configs(sources) if sources else {})
            self._counts = {**existing, **counts}
            self.replies.partitions = counts[self.replies.topic]
            if self.app.tables:
                self._bind_tables({**existing, **counts})
        finally:
            await admin.close()
        await self._connect_schemas()
        for name in self.topology.undeclared:
            log.info("agent %s awaits something before its first event (%s): topics its pipeline reads are "
                     "subscribed when it gets there", name, self.topology.undeclared[name])
        for topic in self.all_topics():
            topic.attach(self.producer, self)
        for agent in self.app.agents.values():
            agent.attach(self.replies, self)
        log.info("worker %s starting on %s (event loop: %s): agents %s", self.app.id, self.settings.broker,
                 running_loop_name(), ", ".join(self.app.agents) or "none")

    async def _connect_schemas(self) -> None:
        """Connect the codecs of topics declared in a registry format (engine.schemas) to the schema
        registry: their schemas registered before the first record is read or written."""
        self._registry = await connect_schemas(self.all_topics(), self.settings)

    def _group_topology(self) -> GroupTopology:
        """What a streams group is told this app reads and keeps (read as the consumer starts, once the
        topics exist): the topics the conductor subscribes to, with their counts on the broker, the
        repartition topics among them, and the changelogs of the tables partitioned with the tasks."""
        plans = self.topology.topics
        count = self._counts

        def spec(name: str) -> TopicSpec:
            plan = plans[name]
            return TopicSpec(name, count.get(name, plan.partitions), plan.replication, plan.config)

        read = self.conductor.subscribed_topics()
        repartition = tuple(spec(name) for name in read
                            if name in plans and plans[name].role == "repartition")
        changelogs = tuple(spec(t.changelog_topic.name) for t in self.app.tables.values()
                           if not t.is_global and t.has_own_changelog)
        inside = {s.name for s in repartition}
        return GroupTopology(sources={name: count[name] for name in read if name not in inside},
                             repartition=repartition, changelogs=changelogs)

    def _bind_tables(self, counts: Mapping[str, int]) -> None:
        """Bind the app's tables to this worker (engine.scope): their partition counts (their changelogs',
        `counts` of every topic on the broker), the topics whose events give stream time, this worker's
        checkpoint and web server; each windowed table learns the app's topics (for their extractors)."""
        query = self.web.query if self.web is not None else None
        for table in self.app.tables.values():
            count = counts.get(table.changelog_topic.name) or planned_partitions(table.changelog_topic,
                                                                                  self.settings)
            timed = table.windowed is not None and table.windowed.timestamp is None
            table.bind(self, count, counts, writers=self.timed_topics if timed else None,
                       checkpoint=self.tasks.checkpoint, query=query, settings=self.settings,
                       assigned=self.assigned)
            if table.windowed is not None:
                table.windowed.topics = self.app.topics

    async def start(self) -> None:
        """Start, with every task the worker starts knowing it belongs to this worker (engine.scope)."""
        with running_as(self):
            await super().start()

    async def stop(self) -> None:
        with running_as(self):
            await super().stop()
        for table in self.app.tables.values():
            table.unbind(self)

    async def on_stop(self) -> None:
        self.conductor.stop_fetching()
        await self.timers.stop()
        await asyncio.gather(*(runner.stop() for runner in self.runners))
        await self.tasks.stop()  # the final checkpoint, then every task closes
        await self.conductor.stop()
        if self._registry is not None:
            await self._registry.close()

    async def checkpoint(self) -> None:
        """Run a checkpoint now and return once it completed (tests, live exports)."""
        await self.tasks.checkpoint()

    async def on_started(self) -> None:
        log.info("worker %s running", self.app.id)

    def request_stop(self) -> None:
        self._stopping.set()

    async def run_until_stopped(self) -> None:
        """Run until `request_stop` or a failure; a failure is raised as WorkerFailed after stopping."""
        waiters = [self._stopping.wait(), self.failed.wait()]  # any service's failure reaches the root
        tasks = [asyncio.ensure_future(w) for w in waiters]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.stop()
            for topic in self.all_topics():
                topic.attach(None, self)
            for agent in self.app.agents.values():
                agent.attach(None, self)
        self.raise_failure()

    def raise_failure(self) -> None:
        """Raise WorkerFailed if a service of this worker failed (its failure reaches the root)."""
        failure = self.failure
        if failure is not None:
            raise WorkerFailed(f"worker {self.app.id!r} stopped: {failure}") from failure


async def _ask_to_beat(endpoints: Collection[str]) -> None:
    """Ask the peers at `endpoints` to heartbeat now (engine.web.server's, imported only by a worker that
    serves): a streams member's peers hear its changes at once."""
    from engine.web.server import ask_to_beat

    await ask_to_beat(endpoints)
