"""Worker settings: one frozen object, validated once at start-up, environment read in one place.

Precedence, lowest first: defaults, the arguments given to `App(...)`, `ENGINE_*` environment variables,
command-line options. A bad value fails at start-up with a message naming the setting and what is expected.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from engine.errors import ConfigError
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
_APP_ID = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True, kw_only=True)
class Settings:
    app_id: str
    broker: str = "kafka://localhost:9092"
    data_dir: Path = Path("data")
    commit_interval: timedelta = timedelta(seconds=1)
    shutdown_timeout: timedelta = timedelta(seconds=10)
    stuck_event_warning: timedelta = timedelta(seconds=10)
    # How often a worker deletes the records its repartition partitions committed (engine.tasks.purge).
    repartition_purge_interval: timedelta = timedelta(seconds=30)
    # How long the event loop may stand still (an agent blocking it) before the loop monitor names the agent,
    # the record and the blocking stack (engine.monitors.loopwatch).
    blocked_loop_warning: timedelta = timedelta(seconds=2)
    # A record during which its partition was taken from this worker this many times is dead-lettered
    # (engine.tasks.poison): it blocks the loop past the session timeout, and would cycle for ever.
    poison_after_losses: int = 3
    # How long the group waits for a silent worker (SIGKILLed, frozen, blocking its loop) before its
    # partitions move; within the broker's group.min/max.session.timeout.ms (6 s and 30 min by default).
    session_timeout: timedelta = timedelta(seconds=10)
    # How long the worker's consumer may go without asking for records before it leaves the group (Kafka's
    # max.poll.interval.ms, aiokafka's check). The fetch loop asks every half second whatever agents do (a
    # stuck agent holds back only its own partitions): it runs out only when the fetch loop itself stands
    # still that long (the event loop blocked while it was not waiting for records).
    max_poll_interval: timedelta = timedelta(minutes=5)
    # Exactly-once: how long a task's transaction may stay open before the broker aborts it (the task is
    # then rewound to its last commit): the longest an event may take, and how long a dead worker's open
    # transaction holds read_committed readers back. At most the broker's transaction.max.timeout.ms.
    transaction_timeout: timedelta = timedelta(seconds=15)
    # How long a task whose inputs go in timestamp order (a table over a source topic among them) holds its
    # other inputs back while one has nothing buffered and nothing more on the broker, waiting for its
    # producers (Kafka Streams' max.task.idle.ms). Records known on the broker are always waited for; a
    # negative value never waits, not even for those (max.task.idle.ms=-1: possibly out of order).
    max_task_idle: timedelta = timedelta(0)
    topic_partitions: int = 4
    topic_replication: int | None = None  # None: the broker's default.replication.factor
    mailbox_size: int = 1000
    max_poll_records: int = 1000
    store: str = "rocksdb://"
    # Bytes of memory every RocksDB store of a worker shares: one block cache, with the memtables charged to
    # it (up to half), as Kafka Streams' BoundedMemoryRocksDBConfig. Unbounded, each store's memtables grew
    # until 64 MB before their first flush, so a worker's memory grew with its writes times its stores.
    store_memory: int = 64 * 1024 * 1024
    standby_replicas: int = 0
    # Static membership (KIP-345): "auto" (the worker id kept in the data dir) or a name unique in the group;
    # None: dynamic membership (a leave rebalances at once; a restart rebalances twice).
    group_instance_id: str | None = None
    acceptable_recovery_lag: int = 10_000  # records: a partition moves only to a store this close to its end
    state_cleanup_delay: timedelta = timedelta(minutes=10)  # a store not assigned here this long is deleted
    # How long the producer of agents' sends (at-least-once) waits to fill a batch. 0 (aiokafka's default):
    # under load batches fill while the previous request is in flight anyway, so throughput does not need
    # the wait, and a lone event is not held back by it (benchmarks/passthrough.py, benchmarks/latency.py).
    # Transactional producers (changelogs; everything under exactly-once) wait TRANSACTIONAL_LINGER
    # (engine.transport.kafka) whatever this says: their records are visible only at commit.
    producer_linger: timedelta = timedelta(0)
    agent_error_policy: ErrorPolicy = "dlq"
    processing_guarantee: Guarantee = "at_least_once"
    auto_offset_reset: OffsetReset = "earliest"  # where a new group (no committed offset) starts reading
    agent_max_restarts: int = 10
    agent_restart_window: timedelta = timedelta(minutes=1)
    broker_options: Mapping[str, Any] = field(default_factory=dict)
    # The worker's web server (engine.web): table queries, /health, /ready. It binds web_host:web_port or
    # the next free port (0: any free port); web_enabled=False turns it off (then no query reaches this
    # worker, and forwarded ones get 503).
    web_enabled: bool = True
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    # The event loop `engine worker` runs on (engine.loops): uvloop when installed ("auto"; the extra
    # engine[fast]), or asyncio's own.
    event_loop: EventLoop = "auto"
    # Traces with OpenTelemetry (engine.tracing, the extra engine[otel]): a span per event an agent
    # processes, continuing the trace context in the record's headers, that context written into the
    # headers of what agents send, spans for checkpoints and rebalances. Spans go to the global tracer
    # provider, which the app configures (its sampler decides which are recorded).
    tracing: bool = False
    # How many worker processes `engine worker` runs (engine.processes): each a member of the group with its
    # own share of the data dir and its own web port, under one supervisor process that restarts a crashed
    # one; "auto": one per core this process may run on. 1: the worker runs in the command's own process.
    # Only `engine worker` reads it: a worker run from code (`run_worker`, `Worker`) is the one process.
    processes: Processes = 1
    # A secured cluster (every client of the worker and of the CLI): the protocol, SASL's mechanism and
    # credentials, and TLS files (PEM). `broker_options` given to App(...) win over these. The password is
    # never shown: not in repr, not in errors.
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

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


def _fail(name: str, value: object, expected: str) -> None:
    shown = f"{value.total_seconds():g}s" if isinstance(value, timedelta) else repr(value)
    raise ConfigError(f"setting {name!r} is {shown}; {expected}")


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _validate_security(s: Settings) -> None:
    if s.security_protocol not in SECURITY_PROTOCOLS:
        _fail("security_protocol", s.security_protocol, f"expected one of {SECURITY_PROTOCOLS}")
    sasl = s.security_protocol.startswith("SASL_")
    if sasl:
        if s.sasl_mechanism not in SASL_MECHANISMS:
            _fail("sasl_mechanism", s.sasl_mechanism, f"expected one of {SASL_MECHANISMS} with "
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
            _fail(name, path, "expected a readable PEM file")


def validate(s: Settings) -> None:
    if not isinstance(s.app_id, str) or not _APP_ID.match(s.app_id):
        _fail("app_id", s.app_id, "use 1-200 letters, digits, '.', '_' or '-' (it names Kafka topics)")
    _validate_broker(s.broker)
    for name in ("commit_interval", "shutdown_timeout", "agent_restart_window", "stuck_event_warning",
                 "repartition_purge_interval", "state_cleanup_delay", "blocked_loop_warning",
                 "session_timeout", "max_poll_interval", "transaction_timeout"):
        value = getattr(s, name)
        if not isinstance(value, timedelta) or value <= timedelta(0):
            _fail(name, value, "expected a positive duration (seconds or timedelta)")
    if not isinstance(s.max_task_idle, timedelta):
        _fail("max_task_idle", s.max_task_idle, "expected a duration (seconds or a timedelta)")
    if not isinstance(s.producer_linger, timedelta) or s.producer_linger < timedelta(0):
        _fail("producer_linger", s.producer_linger, "expected at least 0 (seconds or a timedelta)")
    for name in ("topic_partitions", "topic_replication", "mailbox_size", "max_poll_records", "store_memory",
                 "poison_after_losses"):
        value = getattr(s, name)
        if name == "topic_replication" and value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            _fail(name, value, "expected an integer of at least 1")
    if store_scheme(s.store) is None:
        _fail("store", s.store, "expected rocksdb:// or memory://")
    for name in ("standby_replicas", "acceptable_recovery_lag"):
        value = getattr(s, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            _fail(name, value, "expected an integer of at least 0")
    if not isinstance(s.agent_max_restarts, int) or s.agent_max_restarts < 0:
        _fail("agent_max_restarts", s.agent_max_restarts, "expected an integer of at least 0")
    if s.agent_error_policy not in ERROR_POLICIES:
        _fail("agent_error_policy", s.agent_error_policy, f"expected one of {ERROR_POLICIES}")
    if s.processing_guarantee not in GUARANTEES:
        _fail("processing_guarantee", s.processing_guarantee, f"expected one of {GUARANTEES}")
    _validate_security(s)
    if s.event_loop not in EVENT_LOOPS:
        _fail("event_loop", s.event_loop, f"expected one of {EVENT_LOOPS}")
    if s.auto_offset_reset not in OFFSET_RESETS:
        _fail("auto_offset_reset", s.auto_offset_reset, f"expected one of {OFFSET_RESETS}")
    if s.group_instance_id is not None and (not isinstance(s.group_instance_id, str)
                                            or not _APP_ID.match(s.group_instance_id)):
        _fail("group_instance_id", s.group_instance_id,
              "expected 'auto' or 1-200 letters, digits, '.', '_' or '-'")
    if s.processes != "auto" and (not isinstance(s.processes, int) or isinstance(s.processes, bool)
                                  or s.processes < 1):
        _fail("processes", s.processes, "expected a number of at least 1, or 'auto' (one per core)")
    for name in ("web_enabled", "tracing"):
        if not isinstance(getattr(s, name), bool):
            _fail(name, getattr(s, name), "expected true or false")
    if not isinstance(s.web_port, int) or isinstance(s.web_port, bool) or not 0 <= s.web_port < 65536:
        _fail("web_port", s.web_port, "expected a port number (0: any free port)")
    if not isinstance(s.web_host, str) or not s.web_host:
        _fail("web_host", s.web_host, "expected a host name or address to listen on")
    if not isinstance(s.data_dir, Path):
        _fail("data_dir", s.data_dir, "expected a path")


def _validate_broker(url: object) -> None:
    expected = "expected kafka://host:port[,host:port...] or memory://[name]"
    if not isinstance(url, str) or "://" not in url:
        _fail("broker", url, expected)
        return
    scheme, rest = url.split("://", 1)
    if scheme == "memory":
        return
    if scheme != "kafka":
        _fail("broker", url, f"unknown scheme {scheme!r}; {expected}")
    for hostport in rest.split(","):
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            _fail("broker", url, f"{hostport!r} is not host:port; {expected}")


_DURATIONS = {"commit_interval", "shutdown_timeout", "agent_restart_window", "stuck_event_warning",
              "repartition_purge_interval", "state_cleanup_delay", "producer_linger", "blocked_loop_warning",
              "max_task_idle", "session_timeout", "max_poll_interval", "transaction_timeout"}
_INTS = {"topic_partitions", "topic_replication", "mailbox_size", "max_poll_records", "agent_max_restarts",
         "standby_replicas", "acceptable_recovery_lag", "store_memory", "poison_after_losses", "web_port"}
_BOOLS = {"web_enabled", "tracing"}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
ENV_PREFIX = "ENGINE_"
# Variables of engine's own tools that share the prefix but are not settings (the test suite's broker).
NOT_SETTINGS = frozenset({"ENGINE_TEST_KAFKA", "ENGINE_KAFKA_CACHE"})


def coerce(name: str, value: Any) -> Any:
    """Turn a user-given or environment value into the setting's type; a bad one is a ConfigError."""
    try:
        if name in _DURATIONS and not isinstance(value, timedelta):
            return timedelta(seconds=float(value))
        if name in _INTS and isinstance(value, str):
            return int(value)
        if name in _BOOLS and isinstance(value, str):
            if value.lower() not in _TRUE | _FALSE:
                raise ValueError(value)
            return value.lower() in _TRUE
        if name == "data_dir":
            return Path(value)
        if name == "processes" and isinstance(value, str) and value != "auto":
            return int(value)
    except (TypeError, ValueError):
        _fail(name, value, "expected a number of seconds" if name in _DURATIONS
              else "expected true or false" if name in _BOOLS
              else "expected a number of processes or 'auto'" if name == "processes" else "expected an int")
    return value


def load_settings(
    app_id: str,
    given: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Build and validate Settings: defaults < `given` (App arguments) < ENGINE_* env < `overrides`."""
    known = {f.name for f in dataclasses.fields(Settings)} - {"app_id"}
    values: dict[str, Any] = {}
    for source, label in ((given, "App argument"), (overrides or {}, "option")):
        for name in source:
            if name not in known:
                raise ConfigError(f"unknown setting {name!r} ({label}); known: {', '.join(sorted(known))}")
    values.update(given)
    env = os.environ if environ is None else environ
    for variable in sorted(env):
        name = variable[len(ENV_PREFIX):].lower()
        if variable.startswith(ENV_PREFIX) and variable not in NOT_SETTINGS and (
                name not in known or name == "broker_options"):
            expected = ", ".join(ENV_PREFIX + n.upper() for n in sorted(known - {"broker_options"}))
            why = ("broker_options can only be given to App(...)" if name == "broker_options"
                   else f"known: {expected}")
            raise ConfigError(f"unknown setting {variable!r} (environment variable); {why}")
    for name in known - {"broker_options"}:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = raw
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return Settings(app_id=app_id, **{k: coerce(k, v) for k, v in values.items()})
