"""The transport seam: what engine needs from a broker, as Protocols. Kafka and memory implement it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from engine.events import TP, Headers, RawRecord

if TYPE_CHECKING:
    import asyncio
    from contextlib import AbstractContextManager

    from engine.assignor import Assignment, Placement

PartitionsCallback = Callable[[set[TP]], Awaitable[None]]
# A record for Producer.send_many: key, value, headers, timestamp in ms (None: now).
KeyedRecord = tuple[bytes | None, bytes | None, Headers, int | None]


@dataclass(frozen=True)
class ClientTuning:
    """How a worker's broker clients behave, from its settings (the defaults are Kafka's and engine's)."""

    linger: float = 0.0  # seconds a non-transactional producer waits to fill a batch
    # Seconds without a heartbeat before the group gives a member's partitions to the others (a SIGKILLed
    # or frozen worker's partitions move after this long); heartbeats go at a third of it.
    session_timeout: float = 10.0
    # Seconds the consumer may go without asking for records before it leaves the group.
    max_poll_interval: float = 300.0
    # Seconds a transaction may stay open before the broker aborts it: how long a dead worker's open
    # transaction holds read_committed readers back, and how long one event may take under exactly-once.
    transaction_timeout: float = 15.0
    # Whether consumers read fetched records a batch at a time through engine's reader of aiokafka's
    # fetches (checked at start; a misfit falls back to aiokafka's getmany), or through getmany at once.
    fetch_batches: bool = True


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    replication: int | None = None  # None: the broker's default
    config: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupTopology:
    """What the group reads and keeps, as a streams group (KIP-1071) is told it when a worker joins: the
    topics read through the group with their partition counts, the repartition topics among them (the app
    writes them too), and the changelogs of its tables. The same on every worker of one version of the app."""

    sources: Mapping[str, int]  # topics read through the group, but the repartition ones: partitions
    repartition: tuple[TopicSpec, ...] = ()
    changelogs: tuple[TopicSpec, ...] = ()

    @property
    def read(self) -> dict[str, int]:
        """Every topic read through the group, repartition topics included: its partitions."""
        return {**self.sources, **{spec.name: spec.partitions for spec in self.repartition}}


@dataclass(frozen=True)
class GroupMember:
    """One member of a consumer group, as the group coordinator describes it."""

    member_id: str
    host: str
    assignment: Assignment  # what engine's assignor gave it (active, standby, warming, the owners map)
    positions: Mapping[int, int]  # what it reported when it joined: its stores' changelog positions per task


@dataclass(frozen=True)
class GroupDescription:
    state: str  # Stable, PreparingRebalance, CompletingRebalance, Empty, Dead
    members: list[GroupMember]


class Consumer(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def subscribe(self, topics: Collection[str]) -> None:
        """Join the group for `topics` (may be called again with a larger set)."""

    def assign(self, tps: Collection[TP]) -> None:
        """Outside any group: read exactly these partitions (replaces the previous assignment)."""

    def seek(self, tp: TP, offset: int) -> None:
        """Read `tp` from `offset` next."""

    async def position(self, tp: TP) -> int:
        """The offset the next fetch of `tp` starts at."""

    async def offsets(self, tps: Collection[TP]) -> dict[TP, tuple[int, int]]:
        """(first offset, end offset) of each partition: the log is [first, end)."""

    async def offsets_at(self, tps: Collection[TP], timestamp_ms: int) -> dict[TP, int]:
        """The offset of the first record of each partition at or after `timestamp_ms` (the end offset if
        there is none)."""

    async def lag(self, tp: TP) -> int | None:
        """How many records of an assigned partition the broker is known to hold past what was fetched (as
        of the last fetch, without asking the broker); None if not known yet."""

    def fetched_at(self, tp: TP) -> float | None:
        """When the broker last answered a fetch of an assigned partition (`time.time()` seconds; an empty
        answer counts), or None if it has not yet or the transport cannot say: what tells a fetcher that
        stopped asking from a partition with nothing new (both show no lag)."""

    async def committed(self, tps: Collection[TP]) -> dict[TP, int | None]:
        """The group's committed offset of each partition (None: nothing committed), asked of the broker."""

    def pause(self, tps: Collection[TP]) -> None:
        """Stop returning records of `tps` until resumed (a partition whose table is recovering)."""

    def resume(self, tps: Collection[TP]) -> None: ...

    def hold_back(self, tps: Collection[TP]) -> None:
        """Stop returning records of `tps` until let through, keeping what was fetched of them (a pause
        drops that, to fetch it again after): for a partition whose records are wanted again soon."""

    def let_through(self, tps: Collection[TP]) -> None: ...

    async def getmany(self, timeout: float | None, max_records: int) -> Mapping[TP, list[RawRecord]]:
        """Up to `max_records` fetched records, waiting up to `timeout` seconds for some. `None` is for a
        caller with nothing else to do meanwhile: wait for as long as nothing changes. A transport that sees
        every change (the in-memory broker: records, seeks, pauses, rebalances) returns at the change, so that
        a worker on virtual time (engine.testing) sleeps through a quiet day in one step; one that cannot
        (Kafka: positions and lags move with fetches in the background) returns empty after its own poll
        interval, and the caller looks again."""

    def waiting_on_worker(self) -> AbstractContextManager[None]:
        """Within the block the fetch loop waits on the worker's own work rather than fetching (a checkpoint
        pausing agents between events): the group must not take that for a stalled consumer (Kafka's
        `max.poll.interval.ms`), as a `getmany` whose partitions are all held back does not either."""

    def wakeup(self) -> None:
        """Have a `getmany` that waits for as long as nothing changes return now: the caller changed what it
        wants read (a transport whose fetch returns after a poll interval anyway may do nothing)."""

    async def commit(self, offsets: Mapping[TP, int]) -> None: ...

    async def confirm_membership(self) -> None:
        """Return if the group still counts this consumer as a member (asked of the broker now); raise
        MembershipLost if it does not, or if that cannot be confirmed. A consumer outside a group returns."""

    def assignment(self) -> set[TP]: ...

    def request_rebalance(self) -> None:
        """Ask the group to rebalance (a warm-up replica caught up: its partition may move now)."""

    @property
    def group_protocol(self) -> str | None:
        """The group protocol this consumer's membership speaks, "classic" or "streams" (known once started);
        None outside a group."""

    def group_generation(self) -> int | None:
        """The classic group's generation, or this streams group member's epoch: what moves at each change
        of the group that reached this member (None outside a group, or before it joined)."""


class Producer(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> asyncio.Future[object]:
        """Enqueue a record; the returned future resolves when the broker acknowledged it. The record's
        timestamp is `timestamp_ms` (event time carried across a repartition), or now."""

    async def send_batch(self, topic: str, partition: int,
                         records: Sequence[tuple[bytes | None, bytes | None]],
                         timestamps: Sequence[int] | None = None) -> asyncio.Future[int]:
        """Enqueue (key, value) records for one partition, stamped with `timestamps` (one per record: a
        final window's event time) or now, as whole batches (a changelog's writes at a checkpoint): none of
        `send`'s per-record partitioning and futures. The returned future resolves to the offset of the
        last record once the broker acknowledged it; `records` is not empty."""

    async def send_many(self, topic: str, records: Sequence[KeyedRecord]) -> None:
        """Enqueue (key, value, headers, timestamp ms or None for now) records, each to its key's partition as
        `send` picks it (keyless ones: one partition for them all, picked at random), in their order, as
        whole batches per partition where the transport can (a group_by forwarding a fetched batch): none
        of `send`'s per-record futures. All of them are enqueued or none, also when the caller is cancelled
        while this waits: a run given back to its mailbox is sent again once, never in part twice. A
        record larger than the producer may send is RecordTooLarge (with its index), raised before any is
        enqueued. Failures to deliver surface at the next `flush` or commit, as `send`'s do for a record no
        one awaits."""

    async def flush(self) -> None:
        """Wait until everything enqueued so far is acknowledged; raise DeliveryFailed if any was not."""

    def for_partition(self, number: int) -> Producer:
        """The producer whose transaction holds what task `number` (a partition number) sends; a producer
        without per-task transactions returns itself."""

    @property
    def transactional(self) -> bool:
        """Whether sends go into transactions that `commit_transaction` closes."""

    async def commit_transaction(self, offsets: Mapping[TP, int], group_id: str) -> None:
        """Commit, atomically, everything sent since the last commit and `offsets` as `group_id`'s consumed
        positions (the next offset to read), then open the next transaction. Sends wait meanwhile."""


class Admin(Protocol):
    async def create_topics(self, specs: Collection[TopicSpec]) -> dict[str, int]:
        """Create the topics that do not exist yet (existing ones are left as they are); returns every
        topic's partition count as described once all of `specs` are visible. (Use these counts: on a
        cluster, a second `describe_topics` may ask a broker that has not heard of a new topic yet.)"""

    async def describe_topics(self) -> dict[str, int]:
        """Every topic's partition count."""

    async def describe_group(self, group_id: str) -> GroupDescription:
        """The group's state and members, with what engine's assignor gave each."""

    async def committed(self, group_id: str) -> dict[TP, int]:
        """The group's committed offset of every partition it committed."""

    async def topic_configs(self, names: Collection[str]) -> dict[str, dict[str, str]]:
        """The configs (cleanup.policy, retention.ms, ...) of each existing topic of `names`."""

    async def topic_ids(self, names: Collection[str]) -> dict[str, bytes]:
        """The id of each existing topic of `names`: its identity, new when a topic is deleted and recreated
        under the same name. ({} where the broker cannot tell.)"""

    async def delete_topics(self, names: Collection[str]) -> None:
        """Delete these topics (and their records); returns once the broker no longer lists them."""

    async def set_committed(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        """Commit these offsets for a group without members (what a reset does)."""

    async def delete_records(self, before: Mapping[TP, int]) -> None:
        """Delete each partition's records before the offset given (its log start moves there)."""

    async def close(self) -> None: ...


class Transport(Protocol):
    url: str

    def consumer(
        self,
        *,
        group_id: str | None,
        on_assigned: PartitionsCallback | None = None,
        on_revoked: PartitionsCallback | None = None,
        on_lost: PartitionsCallback | None = None,
        max_poll_records: int = 1000,
        auto_offset_reset: str = "earliest",
        placement: Placement | None = None,
        instance_id: str | None = None,
        group_protocol: str = "classic",
        group_topology: Callable[[], GroupTopology] | None = None,
    ) -> Consumer:
        """A consumer; in a group, `on_revoked` is called with partitions taken back while this consumer is
        still their owner, `on_lost` with partitions the group gave away after this member's session expired
        (no `on_lost`: both go to `on_revoked`). A partition the group never committed is read from its
        first offset ("earliest") or from its end ("latest"). A group's partitions are placed by
        engine.assignor (the same on every transport), with what `placement` brings and hears. With
        `instance_id` the member is static (KIP-345): it does not leave the group when it stops, and if it
        comes back within the session timeout it gets its partitions back without a rebalance.
        `group_protocol`: "classic" (engine's assignor, every member stopping every partition at each change),
        "streams" (KIP-1071: the broker assigns, from `group_topology`, read when the consumer starts, and a
        change stops only the partitions that move; refused, with what to do, where it cannot be) or "auto"
        (streams where the broker offers it and the group can be one, else classic)."""

    def producer(self, transactional_id: str | None = None) -> Producer:
        """A producer; with `transactional_id`, a transactional one (a restarted worker passing the same id
        fences its predecessor and aborts the transaction it left open)."""

    def admin(self) -> Admin: ...
