"""One error tree for everything engine raises (all of it exported from `engine`). Lower libraries' errors
are translated where they enter. The tree (a test keeps it equal to the classes below):

    EngineError
    ├── ConfigError            a setting or a declaration is wrong; says which and what to fix
    │   ├── TopologyError      the topics on the broker do not fit the app (partition counts, compaction)
    │   ├── BadSetting         a setting's value, named as the user gave it (option or variable)
    │   └── MissingDependency  an optional extra is not installed; says which to install
    ├── CodecError
    │   ├── DecodeError        bytes on a topic could not become the declared type
    │   ├── EncodeError        a value could not be encoded for its topic
    │   └── SchemasNotCached   a record names schema ids its codec has not fetched yet (fetched, then again)
    ├── RegistryError          the schema registry's answer
    │   ├── RegistryUnavailable  it did not answer (down, unreachable, failing)
    │   ├── SchemaNotFound     it has no such schema id, subject or version
    │   └── SchemaRefused      it refused a schema: incompatible with the subject's versions, or invalid
    ├── TransportError
    │   ├── BrokerUnavailable  no broker answered at the configured address
    │   │   └── BrokerRefused  a broker answered but refused this client (credentials, TLS)
    │   ├── DeliveryFailed     a produced record was not acknowledged by the broker
    │   │   ├── RecordTooLarge larger than the producer may send: refused before anything was enqueued
    │   │   └── ProducerFenced a newer producer with the same transactional id took over
    │   ├── MembershipLost     the group no longer counts this worker as a member (its session expired)
    │   └── OffsetOutOfRange   a reader asked for offsets the log no longer holds (deleted or retained away)
    ├── PartitionMigrated      the event's partition moved to another worker while it was processed
    │   └── TransactionAborted its task's transaction takes no more records (aborted or fenced): rewound
    ├── InvalidTimestamp       an event's time is negative (no timestamp): it cannot be put in a window
    ├── NotRunning             a send/ask before the worker started, or after it stopped
    ├── AskTimeout             an agent did not reply in time
    ├── WorkerFailed           an agent or timer failed past its policy; the worker stopped
    ├── ExportError            a table cannot be exported as asked (a target, a schema, no stores)
    │   ├── LakeConflict       another writer committed a version this one conflicts with: planned again
    │   └── ChangelogGone      the changelog no longer holds the records since the last export
    ├── TableError             a table operation that cannot be done here
    │   ├── KeyNotInPartition  a write to a key of another partition than the current event's
    │   └── PartitionNotLocal  the key's partition is another worker's: `table.query(key)` asks it
    │       └── PartitionNotReady  ... or not ready here yet (restoring, nothing assigned yet): retry
    ├── StoreError             a store could not be opened or written
    │   └── StoreCorrupt       a store's files are unreadable: destroyed and rebuilt from its changelog
    ├── PoisonRecord           a record its partition was lost over too often: dead-lettered
    ├── TransactionsFailed     some tasks' transactions did not commit (`failed`: which and why)
    ├── CheckpointError        a checkpoint could not complete; its cut was aborted
    ├── AgentReturned          an agent function returned while its stream was open
    ├── IllegalTaskTransition  a task asked to go where its state machine does not lead (a bug)
    ├── ResetRefused           the app cannot be reset now (a worker of it runs)
    ├── NotAStreamsGroup       the group id is a live group of the classic protocol
    └── StreamsUnsupported     the broker does not offer the streams rebalance protocol
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.events import TP


class EngineError(Exception):
    """Root of engine's errors."""


class ConfigError(EngineError, ValueError):
    """A setting or declaration is invalid; the message names it and says what is expected."""


class TopologyError(ConfigError):
    """The topics on the broker do not fit the app (co-partitioning, partition counts, cleanup policy); the
    message names the topics, what was found and what to do."""


class BadSetting(ConfigError):
    """A setting's value is wrong: which setting and what it expects, so that `load_settings` can name where
    the value came from (the option or the variable, as the user wrote it) instead of the setting."""

    def __init__(self, name: str, shown: str, expected: str) -> None:
        super().__init__(f"setting {name!r} is {shown}; {expected}")
        self.setting = name
        self.expected = expected


class MissingDependency(ConfigError):
    """An optional extra is not installed."""


class CodecError(EngineError):
    """Encoding or decoding failed."""


class DecodeError(CodecError):
    """The bytes of a record could not be decoded into the declared type."""


class EncodeError(CodecError):
    """A value could not be encoded."""


class SchemasNotCached(CodecError):
    """A registry codec met schema ids it has not fetched: whoever decodes awaits `codec.fetch(ids)` (the
    registry asked once per id, off the per-record path) and decodes again. Never a reason to dead-letter."""

    def __init__(self, codec: object, ids: set[int]) -> None:
        super().__init__(f"schema ids {sorted(ids)} not fetched yet")
        self.codec = codec
        self.ids = ids


class RegistryError(EngineError):
    """The schema registry's answer (engine.schemas.registry)."""


class RegistryUnavailable(RegistryError):
    """The registry did not answer: down, unreachable, or failing with a 5xx."""


class SchemaNotFound(RegistryError):
    """The registry has no such schema id, subject or version."""


class SchemaRefused(RegistryError, ConfigError):
    """The registry refused a schema: incompatible with the subject's earlier versions (409), or invalid
    (422); the message keeps the registry's reason."""


class TransportError(EngineError):
    """The broker or the connection to it failed."""


class BrokerUnavailable(TransportError):
    """No broker answered at the configured address."""


class BrokerRefused(BrokerUnavailable):
    """A broker answered but refused this client: its credentials or its TLS."""


class DeliveryFailed(TransportError):
    """The broker did not acknowledge a produced record; nothing after it is committed."""


class RecordTooLarge(DeliveryFailed):
    """A record larger than the producer may send (`max_request_size`): refused before anything of its
    batch was enqueued. `index`: its place among the records given."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


class PartitionMigrated(EngineError):
    """The current event's partition is no longer owned by this worker (revoked or lost while the event was
    processed): its effects must not be applied. The event is dropped without error handling; the partition's
    new owner processes it (from the last committed offset)."""


class TransactionAborted(PartitionMigrated):
    """The transaction of the current event's task can take no more records: the broker aborted it (it was
    open longer than the transaction timeout) or fenced it. Handled as a migration: the event is dropped
    without error handling, and the task is rewound to its last commit (or given up if another worker owns
    it now), so the event is processed again."""


class ProducerFenced(DeliveryFailed):
    """A producer with the same transactional id was started elsewhere (the task's new owner): this one's
    transaction is aborted and it can commit nothing any more."""


class MembershipLost(TransportError):
    """The consumer group no longer counts this worker as a member: its partitions are (or soon will be)
    another worker's. Nothing of them may be written or committed."""


class OffsetOutOfRange(TransportError):
    """A consumer that resets no offsets by itself (auto_offset_reset="none") was positioned where its
    partitions' logs no longer reach: records were deleted below it. Carries the offsets asked for, by
    partition, so that the reader decides what to do (a store that follows a changelog is rebuilt: a silent
    jump would leave it holding values the log no longer has)."""

    def __init__(self, offsets: dict[TP, int]) -> None:
        self.offsets = offsets
        listed = ", ".join(f"{tp.topic}[{tp.partition}] at {o}" for tp, o in sorted(offsets.items()))
        super().__init__(f"offsets no longer on the broker (records deleted below them): {listed}")


class InvalidTimestamp(EngineError):
    """An event has no valid event time (negative: a record written without a timestamp), so no window can
    hold it. Like Kafka Streams' default, it is an error (the agent's error policy applies: the DLQ)."""


class NotRunning(EngineError):
    """The operation needs a running worker."""


class AskTimeout(EngineError, TimeoutError):
    """An agent did not answer an ask in time."""


class WorkerFailed(EngineError):
    """An agent or a timer failed beyond its error policy, so the worker stopped."""


class ExportError(EngineError):
    """A table cannot be exported as asked (its target is not one engine writes, its values do not fit one
    schema, no stores, ...)."""



class LakeConflict(ExportError):
    """Another writer committed a version this one conflicts with; planning again on it resolves it."""


class ChangelogGone(ExportError):
    """The changelog no longer holds the records between two exports (deleted by retention)."""


class TableError(EngineError):
    """A table operation that cannot be done here."""


class KeyNotInPartition(TableError):
    """A write to a key that belongs to another partition than the current event's."""


class PartitionNotLocal(TableError):
    """The key's partition is not active on this worker: another worker owns it (`table.query(key)` asks
    that worker), or it is not ready here yet (PartitionNotReady)."""


class PartitionNotReady(PartitionNotLocal):
    """The key's partition is not ready on this worker yet: assigned here and still being restored from its
    changelog, or nothing assigned yet (the worker is starting, or partitions are moving). A moment later
    the same read succeeds: retry it."""


class StoreError(EngineError):
    """A store could not be opened or written."""


class StoreCorrupt(StoreError):
    """A store's files are unreadable; it must be destroyed and rebuilt from its changelog."""


class PoisonRecord(EngineError):
    """A record during which its partition was lost too many times (it blocks the event loop, or outlasts
    the group's session or the transaction timeout): dead-lettered so that its partition moves on."""


class TransactionsFailed(EngineError):
    """Some tasks' transactions did not commit (the others did); `failed` says which and why."""

    def __init__(self, failed: dict[int, BaseException]) -> None:
        super().__init__("transactions of tasks " + ", ".join(
            f"{n} ({type(e).__name__}: {e})" for n, e in sorted(failed.items())) + " did not commit")
        self.failed = failed

    @property
    def fenced(self) -> set[int]:
        return {n for n, e in self.failed.items() if isinstance(e, ProducerFenced)}


class CheckpointError(EngineError):
    """A checkpoint could not complete; its cut was aborted."""


class AgentReturned(EngineError):
    """The agent function returned while its stream was still open."""


class IllegalTaskTransition(EngineError):
    """A task was asked to go where its state machine does not lead (a bug in whoever asked)."""


class ResetRefused(EngineError):
    """The app cannot be reset now (a worker of it is running)."""


class NotAStreamsGroup(EngineError):
    """The group id belongs to a live group of the classic protocol (its members still in it)."""


class StreamsUnsupported(EngineError):
    """The broker does not offer the streams rebalance protocol (StreamsGroupHeartbeat: Kafka 4.1 and on)."""
