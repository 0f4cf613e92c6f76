"""One error tree for everything engine raises. Lower libraries' errors are translated where they enter.

    EngineError
    ├── ConfigError            a setting or a declaration is wrong; says which and what to fix
    │   └── TopologyError      the topics on the broker do not fit the app (partition counts, compaction)
    ├── CodecError
    │   ├── DecodeError        bytes on a topic could not become the declared type
    │   ├── EncodeError        a value could not be encoded for its topic
    │   └── SchemasNotCached   a record names schema ids its codec has not fetched yet (fetched, then again)
    ├── RegistryError          (engine.schemas) the schema registry's answer
    │   ├── RegistryUnavailable  it did not answer (down, unreachable, failing)
    │   ├── SchemaNotFound     it has no such schema id, subject or version
    │   └── SchemaRefused      it refused a schema: incompatible with the subject's versions, or invalid
    ├── TransportError
    │   ├── BrokerUnavailable  no broker answered at the configured address
    │   ├── DeliveryFailed     a produced record was not acknowledged by the broker
    │   │   └── ProducerFenced a newer producer with the same transactional id took over
    │   ├── MembershipLost     the group no longer counts this worker as a member (its session expired)
    │   └── OffsetOutOfRange   a reader asked for offsets the log no longer holds (deleted or retained away)
    ├── PartitionMigrated      the event's partition moved to another worker while it was processed
    ├── InvalidTimestamp       an event's time is negative (no timestamp): it cannot be put in a window
    ├── NotRunning             a send/ask before the worker started, or after it stopped
    ├── AskTimeout             an agent did not reply in time
    ├── ExportError            a table cannot be exported as asked (a target, a schema, no stores)
    ├── TableError             (engine.tables) a table operation that cannot be done here
    │   ├── KeyNotInPartition  a write to a key of another partition than the current event's
    │   └── PartitionNotLocal  the key's partition is another worker's: `table.query(key)` asks it
    │       └── PartitionNotReady  ... or not ready here yet (restoring, nothing assigned yet): retry
    └── WorkerFailed           an agent or timer failed past its policy; the worker stopped
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
