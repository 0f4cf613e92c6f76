"""Worker settings: one frozen object, validated once at start-up (read from the App's arguments, the
environment and the command line in engine.settings_load). A bad value fails with a message naming the
setting and what is expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from engine.errors import BadSetting, ConfigError
from engine.stores import store_scheme

if TYPE_CHECKING:
    from collections.abc import Mapping

ErrorPolicy = Literal["dlq", "stop"]
ERROR_POLICIES = ("dlq", "stop")
Guarantee = Literal["at_least_once", "exactly_once"]
GUARANTEES = ("at_least_once", "exactly_once")
OffsetReset = Literal["earliest", "latest"]
OFFSET_RESETS = ("earliest", "latest")
EventLoop = Literal["auto", "uvloop", "asyncio"]
EVENT_LOOPS = ("auto", "uvloop", "asyncio")
Processes = int | Literal["auto"]
GroupProtocol = Literal["auto", "streams", "classic"]
GROUP_PROTOCOLS = ("auto", "streams", "classic")
_APP_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def doc(text: str) -> dict[str, str]:
    """A setting's description (markdown), its field's metadata: the one text the settings reference
    (docs/settings.md) and the commands' help (`engine worker --help`) are made from
    (engine.settings_docs)."""
    return {"doc": text}


@dataclass(frozen=True, kw_only=True)
class Settings:
    app_id: str
    broker: str = field(default="kafka://localhost:9092", metadata=doc(
        "the brokers, `kafka://host:port[,host:port...]`, or `memory://[name]`: an in-memory broker in "
        "this process (tests, the demo)"))
    data_dir: Path = field(default=Path("data"), metadata=doc(
        "where a worker keeps its stores, its worker id and its lock, under `<data_dir>/<app>/`"))
    commit_interval: timedelta = field(default=timedelta(seconds=1), metadata=doc(
        "seconds between two checkpoints: changelogs flushed, then the offsets of the events behind them "
        "committed (under exactly-once: a transaction per task)"))
    shutdown_timeout: timedelta = field(default=timedelta(seconds=10), metadata=doc(
        "seconds an agent instance is given to finish its event at a stop (a revoke waits at most 5 s of "
        "it)"))
    stuck_event_warning: timedelta = field(default=timedelta(seconds=10), metadata=doc(
        "seconds inside one event after which an agent is logged with its topic, partition and offset, "
        "and again every 10 s ([agents and streams](agents-and-streams.md#slow-and-stuck-agents))"))
    # How often a worker deletes the records its repartition partitions committed (engine.tasks.purge).
    repartition_purge_interval: timedelta = field(default=timedelta(seconds=30), metadata=doc(
        "seconds between two deletions of the repartition records a worker's tasks committed"))
    # How long the event loop may stand still (an agent blocking it) before the loop monitor names the agent,
    # the record and the blocking stack (engine.monitors.loopwatch).
    blocked_loop_warning: timedelta = field(default=timedelta(seconds=2), metadata=doc(
        "seconds the event loop may stand still before the agents inside an event and the blocking stack "
        "are logged ([rebalances and faults](rebalances-and-faults.md))"))
    # A record during which its partition was taken from this worker this many times is dead-lettered
    # (engine.tasks.poison): it blocks the loop past the session timeout, and would cycle for ever.
    poison_after_losses: int = field(default=3, metadata=doc(
        "a record during which its partition was taken from this worker (or its task rewound) this many "
        "times is dead-lettered as a `PoisonRecord`"))
    # How long the group waits for a silent worker (SIGKILLed, frozen, blocking its loop) before its
    # partitions move; within the broker's group.min/max.session.timeout.ms (6 s and 30 min by default).
    session_timeout: timedelta = field(default=timedelta(seconds=10), metadata=doc(
        "seconds the group waits for a silent worker before its partitions move "
        "([below](#producing-sessions-and-offsets))"))
    # How long the worker's consumer may go without asking for records before it leaves the group (Kafka's
    # max.poll.interval.ms, aiokafka's check). The fetch loop asks every half second whatever agents do (a
    # stuck agent holds back only its own partitions): it runs out only when the fetch loop itself stands
    # still that long (the event loop blocked while it was not waiting for records).
    max_poll_interval: timedelta = field(default=timedelta(minutes=5), metadata=doc(
        "seconds the worker's consumer may go without asking for records before it leaves the group "
        "(Kafka's `max.poll.interval.ms`; the fetch loop asks, not the agents) "
        "([rebalances and faults](rebalances-and-faults.md#a-worker-that-stops-asking-for-records))"))
    # Exactly-once: how long a task's transaction may stay open before the broker aborts it (the task is
    # then rewound to its last commit): the longest an event may take, and how long a dead worker's open
    # transaction holds read_committed readers back. At most the broker's transaction.max.timeout.ms.
    transaction_timeout: timedelta = field(default=timedelta(seconds=15), metadata=doc(
        "seconds an exactly-once transaction may stay open before the broker aborts it "
        "([below](#producing-sessions-and-offsets))"))
    # How long a task whose inputs go in timestamp order (a table over a source topic among them) holds its
    # other inputs back while one has nothing buffered and nothing more on the broker, waiting for its
    # producers (Kafka Streams' max.task.idle.ms). Records known on the broker are always waited for; a
    # negative value never waits, not even for those (max.task.idle.ms=-1: possibly out of order).
    max_task_idle: timedelta = field(default=timedelta(0), metadata=doc(
        "seconds a task whose inputs go in timestamp order holds the others back while one input has "
        "nothing more on the broker; negative: never waits "
        "([joins](joins.md#joins-over-a-backlog-equal-live-joins))"))
    topic_partitions: int = field(default=4, metadata=doc(
        "partitions of a topic the worker creates with nothing to follow ([topology](topology.md))"))
    topic_replication: int | None = field(default=None, metadata=doc(
        "replication factor of the internal topics; none: the broker's `default.replication.factor`"))
    mailbox_size: int = field(default=1000, metadata=doc(
        "events an agent instance's mailbox holds; a full one pauses the partitions that feed it"))
    max_poll_records: int = field(default=1000, metadata=doc(
        "records one fetch returns at most"))
    # Fetched records read a batch at a time by engine's reader of aiokafka's fetch results (a private part
    # of aiokafka, engine.transport.aiokafka_private, checked against the installed aiokafka when a consumer
    # starts): off, or when that check fails (said in a warning), aiokafka's public getmany reads them, a
    # record at a time, slower but relying on nothing private.
    fetch_batches: bool = field(default=True, metadata=doc(
        "fetched records read a batch at a time by engine's reader of aiokafka's fetches (checked against "
        "the installed aiokafka at start: a misfit falls back with a warning); off: aiokafka's public "
        "`getmany`, a record at a time ([operations](operations.md#aiokafkas-private-parts))"))
    store: str = field(default="rocksdb://", metadata=doc(
        "the tables' stores: `rocksdb://`, or `memory://` (tests)"))
    # Bytes of memory every RocksDB store of a worker shares: one block cache, with the memtables charged to
    # it (up to half), as Kafka Streams' BoundedMemoryRocksDBConfig. Unbounded, each store's memtables grew
    # until 64 MB before their first flush, so a worker's memory grew with its writes times its stores.
    store_memory: int = field(default=64 * 1024 * 1024, metadata=doc(
        "bytes of memory all the RocksDB stores of a worker share (64 MiB; [tables](tables.md))"))
    standby_replicas: int = field(default=0, metadata=doc(
        "warm copies of each table partition kept on other workers ([rebalances and "
        "faults](rebalances-and-faults.md))"))
    # How the group's members share the tasks: Kafka's streams rebalance protocol (KIP-1071: the broker
    # assigns, a membership change stops only the tasks that move) or the classic one (every member stops
    # every task at each change); "auto" takes streams where the broker offers it and the group can be one.
    group_protocol: GroupProtocol = field(default="auto", metadata=doc(
        "`auto`, `streams` (KIP-1071: only the tasks that move stop) or `classic` ([rebalances and "
        "faults](rebalances-and-faults.md#the-streams-rebalance-protocol))"))
    # Static membership (KIP-345): "auto" (the worker id kept in the data dir) or a name unique in the group;
    # None: dynamic membership (a leave rebalances at once; a restart rebalances twice).
    group_instance_id: str | None = field(default=None, metadata=doc(
        "static membership (KIP-345): `auto` or a name unique in the group; none: dynamic membership"))
    acceptable_recovery_lag: int = field(default=10_000, metadata=doc(
        "records: a task moves only to a worker whose store of it is this close to its end, else that "
        "worker warms up first"))
    state_cleanup_delay: timedelta = field(default=timedelta(minutes=10), metadata=doc(
        "seconds after which a store no longer assigned to this worker is deleted"))
    # How long the producer of agents' sends (at-least-once) waits to fill a batch. 0 (aiokafka's default):
    # under load batches fill while the previous request is in flight anyway, so throughput does not need
    # the wait, and a lone event is not held back by it (benchmarks/passthrough.py, benchmarks/latency.py).
    # Transactional producers (changelogs; everything under exactly-once) wait TRANSACTIONAL_LINGER
    # (engine.transport.kafka) whatever this says: their records are visible only at commit.
    producer_linger: timedelta = field(default=timedelta(0), metadata=doc(
        "seconds the producer of agents' sends waits to fill a batch "
        "([below](#producing-sessions-and-offsets))"))
    agent_error_policy: ErrorPolicy = field(default="dlq", metadata=doc(
        "what an agent without its own `on_error=` does with a record it fails on: `dlq` or `stop`"))
    processing_guarantee: Guarantee = field(default="at_least_once", metadata=doc(
        "`at_least_once` or `exactly_once` ([exactly-once and guarantees](exactly-once.md))"))
    auto_offset_reset: OffsetReset = field(default="earliest", metadata=doc(
        "where a group with nothing committed starts reading: `earliest` or `latest`"))
    agent_max_restarts: int = field(default=10, metadata=doc(
        "restarts of an agent instance (a crash outside a record) within `agent_restart_window` before "
        "the worker stops with the error"))
    agent_restart_window: timedelta = field(default=timedelta(minutes=1), metadata=doc(
        "seconds over which `agent_max_restarts` counts"))
    broker_options: Mapping[str, Any] = field(default_factory=dict, metadata=doc(
        "aiokafka's client options, passed as they are, over the security settings; only as an `App(...)` "
        "argument"))
    # The worker's web server (engine.web): table queries, /health, /ready. It binds web_host:web_port or
    # the next free port (0: any free port); web_enabled=False turns it off (then no query reaches this
    # worker, and forwarded ones get 503).
    web_enabled: bool = field(default=True, metadata=doc(
        "serve HTTP: table queries, `/health`, `/ready`, `/status`, `/metrics` ([queries](queries.md))"))
    web_host: str = field(default="127.0.0.1", metadata=doc(
        "the address the web server listens on"))
    web_port: int = field(default=6066, metadata=doc(
        "the web server's port, or the next free one when taken; `0`: any free port"))
    # The event loop `engine worker` runs on (engine.loops): uvloop when installed ("auto"; the extra
    # engine-streams[fast]), or asyncio's own.
    event_loop: EventLoop = field(default="auto", metadata=doc(
        "`auto` (uvloop when installed), `uvloop` or `asyncio` ([operations](operations.md#event-loop))"))
    # Traces with OpenTelemetry (engine.tracing, the extra engine-streams[otel]): a span per event an agent
    # processes, continuing the trace context in the record's headers, that context written into the
    # headers of what agents send, spans for checkpoints and rebalances. Spans go to the global tracer
    # provider, which the app configures (its sampler decides which are recorded).
    tracing: bool = field(default=False, metadata=doc(
        "traces with OpenTelemetry (the extra `engine-streams[otel]`): a span per event an agent processes, "
        "the trace context carried in record headers ([operations](operations.md#tracing))"))
    # How many worker processes `engine worker` runs (engine.processes): each a member of the group with its
    # own share of the data dir and its own web port, under one supervisor process that restarts a crashed
    # one; "auto": one per core this process may run on. 1: the worker runs in the command's own process.
    # Only `engine worker` reads it: a worker run from code (`run_worker`, `Worker`) is the one process.
    processes: Processes = field(default=1, metadata=doc(
        "worker processes `engine worker` runs, each a member of the group with its own `<data_dir>/<i>` "
        "and web port `web_port + i`, under one supervisor; `auto`: one per core ([getting "
        "started](getting-started.md#every-core-of-one-machine))"))
    # A secured cluster (every client of the worker and of the CLI): the protocol, SASL's mechanism and
    # credentials, and TLS files (PEM). `broker_options` given to App(...) win over these. The password is
    # never shown: not in repr, not in errors.
    security_protocol: str = field(default="PLAINTEXT", metadata=doc(
        "`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL` ([below](#a-secured-cluster))"))
    sasl_mechanism: str | None = field(default=None, metadata=doc(
        "`PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`"))
    sasl_username: str | None = field(default=None, metadata=doc(
        "SASL's user"))
    sasl_password: str | None = field(default=None, repr=False, metadata=doc(
        "SASL's password: shown nowhere, and on the command line never (`ENGINE_SASL_PASSWORD`)"))
    ssl_cafile: str | None = field(default=None, metadata=doc(
        "the PEM file of the certificate authority that signed the brokers' certificates"))
    ssl_certfile: str | None = field(default=None, metadata=doc(
        "a client certificate (PEM), with `ssl_keyfile`"))
    ssl_keyfile: str | None = field(default=None, metadata=doc(
        "the client certificate's key (PEM)"))
    # The schema registry of topics declared in a registry format (engine.schemas): Confluent's API.
    schema_registry_url: str | None = field(default=None, metadata=doc(
        "the schema registry of the topics declared `Avro()`, `Protobuf()` or `JsonSchema()`: Confluent's "
        "API, `http(s)://host:port[/path]` (Apicurio's: `.../apis/ccompat/v7`; several, comma-separated), or "
        "`memory://[name]`: one in this process (tests, the demo) ([schemas](schemas.md))"))
    schema_registry_auth: str | None = field(default=None, repr=False, metadata=doc(
        "the registry's basic auth, `user:password`: shown nowhere (`ENGINE_SCHEMA_REGISTRY_AUTH`)"))
    schema_registry_cafile: str | None = field(default=None, metadata=doc(
        "the PEM file of the certificate authority that signed the registry's certificate"))
    schema_registry_certfile: str | None = field(default=None, metadata=doc(
        "a client certificate for the registry (PEM), with `schema_registry_keyfile`"))
    schema_registry_keyfile: str | None = field(default=None, metadata=doc(
        "the registry client certificate's key (PEM)"))


    def __post_init__(self) -> None:
        validate(self)

    def client_options(self) -> dict[str, Any]:
        """The options every broker client gets (engine.transport): the security settings, then
        `broker_options` over them."""
        options: dict[str, Any] = {}
        if self.security_protocol != "PLAINTEXT":
            options["security_protocol"] = self.security_protocol
        for name in ("sasl_mechanism", "sasl_username", "sasl_password", "ssl_cafile", "ssl_certfile",
                     "ssl_keyfile"):
            value = getattr(self, name)
            if value is not None:
                options[name] = value
        return {**options, **self.broker_options}

    @property
    def transport_scheme(self) -> str:
        return urlsplit(self.broker).scheme

    @property
    def app_dir(self) -> Path:
        """Where this app's worker keeps what it keeps locally (stores, its worker id): one folder per app
        id under `data_dir`."""
        return self.data_dir / self.app_id

    @property
    def bootstrap_servers(self) -> list[str]:
        """host:port pairs of a kafka:// URL."""
        return self.broker.split("://", 1)[1].split(",")


def fail(name: str, value: object, expected: str) -> None:
    shown = f"{value.total_seconds():g}s" if isinstance(value, timedelta) else repr(value)
    raise BadSetting(name, shown, expected)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _validate_security(s: Settings) -> None:
    if s.security_protocol not in SECURITY_PROTOCOLS:
        fail("security_protocol", s.security_protocol, f"expected one of {SECURITY_PROTOCOLS}")
    sasl = s.security_protocol.startswith("SASL_")
    if sasl:
        if s.sasl_mechanism not in SASL_MECHANISMS:
            fail("sasl_mechanism", s.sasl_mechanism, f"expected one of {SASL_MECHANISMS} with "
                                                      f"security_protocol {s.security_protocol}")
        if not s.sasl_username or not s.sasl_password:
            raise ConfigError(f"security_protocol {s.security_protocol} needs sasl_username and "
                              "sasl_password (ENGINE_SASL_USERNAME, ENGINE_SASL_PASSWORD)")
    elif s.sasl_mechanism is not None or s.sasl_username is not None or s.sasl_password is not None:
        raise ConfigError(f"SASL settings are given but security_protocol is {s.security_protocol}; use "
                          "SASL_SSL or SASL_PLAINTEXT")
    tls = s.security_protocol in ("SSL", "SASL_SSL")
    files = {"ssl_cafile": s.ssl_cafile, "ssl_certfile": s.ssl_certfile, "ssl_keyfile": s.ssl_keyfile}
    if not tls and any(files.values()):
        raise ConfigError(f"TLS files are given but security_protocol is {s.security_protocol}; use SSL or "
                          "SASL_SSL")
    if (s.ssl_certfile is None) != (s.ssl_keyfile is None):
        raise ConfigError("ssl_certfile and ssl_keyfile go together (a client certificate and its key)")
    for name, path in files.items():
        if path is not None and not Path(path).is_file():
            fail(name, path, "expected a readable PEM file")


def _validate_registry(s: Settings) -> None:
    url = s.schema_registry_url
    others = {"schema_registry_auth": s.schema_registry_auth,
              "schema_registry_cafile": s.schema_registry_cafile,
              "schema_registry_certfile": s.schema_registry_certfile,
              "schema_registry_keyfile": s.schema_registry_keyfile}
    if url is None:
        given = [name for name, value in others.items() if value is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} given without schema_registry_url")
        return
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if parts.scheme == "memory":
            continue
        if parts.scheme not in ("http", "https") or not parts.hostname:
            fail("schema_registry_url", url, "expected http(s)://host:port[/path] (comma-separated for "
                                             "several) or memory://[name]")
    if s.schema_registry_auth is not None and ":" not in s.schema_registry_auth:
        raise ConfigError("schema_registry_auth: expected user:password")
    if (s.schema_registry_certfile is None) != (s.schema_registry_keyfile is None):
        raise ConfigError("schema_registry_certfile and schema_registry_keyfile go together (a client "
                          "certificate and its key)")
    for name in ("schema_registry_cafile", "schema_registry_certfile", "schema_registry_keyfile"):
        path = others[name]
        if path is not None and not Path(path).is_file():
            fail(name, path, "expected a readable PEM file")


def validate(s: Settings) -> None:
    if not isinstance(s.app_id, str) or not _APP_ID.match(s.app_id):
        fail("app_id", s.app_id, "use 1-200 letters, digits, '.', '_' or '-' (it names Kafka topics)")
    _validate_broker(s.broker)
    for name in ("commit_interval", "shutdown_timeout", "agent_restart_window", "stuck_event_warning",
                 "repartition_purge_interval", "state_cleanup_delay", "blocked_loop_warning",
                 "session_timeout", "max_poll_interval", "transaction_timeout"):
        value = getattr(s, name)
        if not isinstance(value, timedelta) or value <= timedelta(0):
            fail(name, value, "expected a positive duration (seconds or timedelta)")
    if not isinstance(s.max_task_idle, timedelta):
        fail("max_task_idle", s.max_task_idle, "expected a duration (seconds or a timedelta)")
    if not isinstance(s.producer_linger, timedelta) or s.producer_linger < timedelta(0):
        fail("producer_linger", s.producer_linger, "expected at least 0 (seconds or a timedelta)")
    for name in ("topic_partitions", "topic_replication", "mailbox_size", "max_poll_records", "store_memory",
                 "poison_after_losses"):
        value = getattr(s, name)
        if name == "topic_replication" and value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            fail(name, value, "expected an integer of at least 1")
    if store_scheme(s.store) is None:
        fail("store", s.store, "expected rocksdb:// or memory://")
    for name in ("standby_replicas", "acceptable_recovery_lag"):
        value = getattr(s, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            fail(name, value, "expected an integer of at least 0")
    if not isinstance(s.agent_max_restarts, int) or s.agent_max_restarts < 0:
        fail("agent_max_restarts", s.agent_max_restarts, "expected an integer of at least 0")
    if s.agent_error_policy not in ERROR_POLICIES:
        fail("agent_error_policy", s.agent_error_policy, f"expected one of {ERROR_POLICIES}")
    if s.processing_guarantee not in GUARANTEES:
        fail("processing_guarantee", s.processing_guarantee, f"expected one of {GUARANTEES}")
    _validate_security(s)
    _validate_registry(s)
    if s.event_loop not in EVENT_LOOPS:
        fail("event_loop", s.event_loop, f"expected one of {EVENT_LOOPS}")
    if s.auto_offset_reset not in OFFSET_RESETS:
        fail("auto_offset_reset", s.auto_offset_reset, f"expected one of {OFFSET_RESETS}")
    if s.group_protocol not in GROUP_PROTOCOLS:
        fail("group_protocol", s.group_protocol, f"expected one of {GROUP_PROTOCOLS}")
    if s.group_instance_id is not None and (not isinstance(s.group_instance_id, str)
                                            or not _APP_ID.match(s.group_instance_id)):
        fail("group_instance_id", s.group_instance_id,
              "expected 'auto' or 1-200 letters, digits, '.', '_' or '-'")
    if s.processes != "auto" and (not isinstance(s.processes, int) or isinstance(s.processes, bool)
                                  or s.processes < 1):
        fail("processes", s.processes, "expected a number of at least 1, or 'auto' (one per core)")
    for name in ("web_enabled", "tracing"):
        if not isinstance(getattr(s, name), bool):
            fail(name, getattr(s, name), "expected true or false")
    if not isinstance(s.web_port, int) or isinstance(s.web_port, bool) or not 0 <= s.web_port < 65536:
        fail("web_port", s.web_port, "expected a port number (0: any free port)")
    if not isinstance(s.web_host, str) or not s.web_host:
        fail("web_host", s.web_host, "expected a host name or address to listen on")
    if not isinstance(s.data_dir, Path):
        fail("data_dir", s.data_dir, "expected a path")


def _validate_broker(url: object) -> None:
    expected = "expected kafka://host:port[,host:port...] or memory://[name]"
    if not isinstance(url, str) or "://" not in url:
        fail("broker", url, expected)
        return
    scheme, rest = url.split("://", 1)
    if scheme == "memory":
        return
    if scheme != "kafka":
        fail("broker", url, f"unknown scheme {scheme!r}; {expected}")
    for hostport in rest.split(","):
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            fail("broker", url, f"{hostport!r} is not host:port; {expected}")
