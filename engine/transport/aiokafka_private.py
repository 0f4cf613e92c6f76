"""Every use engine makes of aiokafka's private parts, in one room, each saying why the public API cannot do
it. Part of the Kafka transport (with kafka.py and kafka_protocol.py, the only modules that import aiokafka).

aiokafka is pinned (>=0.14,<0.15): each use below is checked against the installed release by
tests/contract/test_aiokafka_private.py, which names the use that broke when a release changes it.

- The group coordinator (`AIOKafkaConsumer._coordinator`): whether this member still belongs to the group,
  asked now (one heartbeat) and read (its generation), and a rejoin asked for. aiokafka's public API has no
  membership check: a checkpoint must not commit, and a failed task must not be set up again, for a worker
  the group has moved on from; and warm-up replicas that caught up ask for the rebalance that moves them.
- The group's committed offsets, fetched through the coordinator's request sender (`_send_req`; an admin
  client's `_send_request` for `engine status` and `engine reset`): aiokafka's own fetches
  (`AIOKafkaConsumer.committed`, the admin's `list_consumer_group_offsets`) read only each partition's
  error code, but a coordinator that is
  loading the group's offsets (a broker restarted), or is not its coordinator any more, answers OffsetFetch
  v2+ with one error for the whole response and no partitions, which aiokafka returns as "nothing committed":
  a task set up on that answer would start from `auto_offset_reset` and process its records a second time
  over tables that hold them already. Engine reads the top-level error and asks again.
- The message accumulator, the request timeout, the maximum request size and the transaction state of a
  producer: the hot path puts a record for a known partition straight into the accumulator, skipping what
  `AIOKafkaProducer.send` checks when engine knows it holds (metadata read twice, size estimate, logging, two
  coroutine frames: a noticeable share of the passthrough's per-event time).
- A run of batches enqueued all at once (`enqueue_batches`, after `waiting_batch` found room): the public
  `send_batch` awaits before each batch, so a fused group_by cancelled in the middle of its run's batches
  (its agent abandoned) would leave part of the run enqueued and send it again from the mailbox: twice in
  one transaction under exactly-once.
- The futures a failed producer leaves behind: when a transaction is fenced (or aborted by the broker) the
  producer's sender fails every batch still in its accumulator, and aiokafka sets that failure on futures of
  its own that nobody awaits (each batch's drain waiter; the transaction's waiter, awaited only by a commit
  that is never asked for once the flush failed). asyncio then logs every one as "Future exception was
  never retrieved", with its traceback. The failure is known and handled (the commit failed, the task is
  rewound), so `retrieve_failures` reads them when the producer stops; the public API has no way to.
- The admin client's controller and network client: CreateTopics v4 (the broker's default replication factor)
  goes to the controller, and Metadata v12 (topic ids) to any broker; aiokafka's admin has neither request.
- The poll interval's clock (`waiting_as_fetching`): aiokafka's consumer leaves its group once it has gone
  `max_poll_interval` without a fetch (its heartbeat counts from the last fetch that ended, by the
  subscription's count of fetches under way). engine's fetch loop sometimes waits on the worker instead of
  fetching: at an exactly-once checkpoint's gate, and when every partition is held back for timestamp
  order (asking for no partition would ask aiokafka for all of them; partitions paused through aiokafka,
  as backpressure pauses them, already count as fetched). Those waits are the worker at work, not
  stalled; the public API cannot say so.
- The positions of a consumer's partitions, read without waiting: a streams group's member assigns its
  partitions by hand, and aiokafka's `assign` replaces the assignment with one that has no positions: those
  of the partitions it keeps are put back (`positions`).
- Metadata requests that never ask the broker to create a topic: aiokafka asks for auto-creation in every
  metadata request, with no option to say no. `refuse_auto_create` makes the requests of one client (engine's
  own) say no; the requests of every other aiokafka client in the process are built as aiokafka builds them.
- The wait for a topic's metadata (`fail_metadata_waiters`): a send to a topic the client has no metadata
  for waits on a future the client's background synchroniser resolves; `close` cancels the synchroniser
  and leaves that future pending, so a send waiting when its producer stops (a task's producer, stopped
  when the task is lost while no broker answers) waits for ever, and its agent stays inside its event.
  A send between two of its tries (asleep for `retry_backoff` after an update that found nothing) asks
  for a new update once the client is closed, and that one nobody resolves. After a producer stops,
  engine fails the pending future and leaves a failed one in its place: the waiting send raises, and so
  does every later update of the closed client, at once.
- The records a consumer's fetches are unpacked into: engine.transport.aiokafka_private_fetch.
- A transaction's offset commit as a group member (`commit_txn_offsets_as`): aiokafka's producer sends a
  transaction's offsets with TxnOffsetCommit v0-2, which names no member, and has no way to send another
  request in that step. The step (AddOffsetsToTxn first, the group coordinator found, retries, aiokafka's
  reading of each error) stays aiokafka's: only the request and the refusals that abort the transaction are
  given (kafka_txn_offsets.py). A refused transaction keeps what it holds on the broker (`abortable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import time
from typing import TYPE_CHECKING, Any, Protocol

import aiokafka.client
from aiokafka.client import CoordinationType
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaError,
    NoError,
    NotCoordinatorForGroupError,
    ProducerClosed,
    for_code,
)
from aiokafka.producer.sender import TxnOffsetCommitHandler
from aiokafka.protocol.commit import OffsetCommitRequest, OffsetFetchRequest
from aiokafka.protocol.metadata import MetadataRequest

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator, Mapping

    from aiokafka import TopicPartition

NO_GENERATION = OffsetCommitRequest.DEFAULT_GENERATION_ID  # a member the coordinator no longer knows

# -- the group coordinator ------------------------------------------------------------------------------


def group_coordinator(consumer: Any) -> Any:
    """aiokafka's group coordinator of a started consumer in a group; None outside one (or not started)."""
    coordinator = getattr(consumer, "_coordinator", None)
    return coordinator if hasattr(coordinator, "_do_heartbeat") else None


def session_expired(coordinator: Any) -> bool:
    """aiokafka resets the member's generation when the coordinator no longer knows it."""
    return coordinator is not None and coordinator.generation == NO_GENERATION


def group_generation(coordinator: Any) -> int | None:
    """The classic group's generation this member is in (None outside a group, or while it joins)."""
    if coordinator is None or coordinator.generation == NO_GENERATION:
        return None
    generation: int = coordinator.generation
    return generation


async def heartbeat(coordinator: Any) -> bool:
    """One heartbeat now; True if the coordinator answered (aiokafka resets the generation itself when the
    answer is that the member is unknown)."""
    answered: bool = await coordinator._do_heartbeat()
    return answered


def request_rejoin(coordinator: Any) -> None:
    coordinator.request_rejoin()


FETCH_RETRY = 0.1  # seconds between two OffsetFetch requests a coordinator answered with a retriable error


async def committed_offsets(coordinator: Any, tps: Collection[TopicPartition] | None
                            ) -> dict[tuple[str, int], int]:
    """The group's committed offset of each of `tps` that has one (None: of every partition it committed), as
    the coordinator knows it once it can answer: an error for the whole response (loading, not the
    coordinator) or for a partition is retried if retriable (a coordinator found anew when it is not the
    group's), and raised (a KafkaError) if not. `coordinator`: a consumer's group coordinator, or an admin's
    (`AdminCoordinator`)."""
    topics: list[tuple[str, list[int]]] | None = None
    if tps is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        topics = list(by_topic.items())
    while True:
        try:
            await coordinator.ensure_coordinator_known()
            response = await coordinator._send_req(OffsetFetchRequest(coordinator.group_id, topics))
        except KafkaError as exc:
            if not exc.retriable:
                raise
            await asyncio.sleep(FETCH_RETRY)
            continue
        offsets, errors = offset_fetch_answer(response)
        if not errors:
            return offsets
        if NotCoordinatorForGroupError in errors:
            coordinator.coordinator_dead()
        if not all(error.retriable for error in errors):
            raise next(error for error in errors if not error.retriable)()
        await asyncio.sleep(FETCH_RETRY)


class AdminCoordinator:
    """A group's coordinator as an admin client reaches it, for `committed_offsets`: aiokafka's admin reads
    an OffsetFetch answer with an error for the whole response (the coordinator loading the group's offsets)
    as "nothing committed" (`list_consumer_group_offsets`), which `engine status` would show and `engine
    reset --shift-by` would shift from the log's start. Its request sender (`_send_request`) is private."""

    def __init__(self, admin: Any, group_id: str) -> None:
        self.admin = admin
        self.group_id = group_id
        self.node: int | None = None

    async def ensure_coordinator_known(self) -> None:
        if self.node is None:
            self.node = await self.admin.find_coordinator(self.group_id)

    async def _send_req(self, request: Any) -> Any:
        return await self.admin._send_request(request, self.node)

    def coordinator_dead(self) -> None:
        self.node = None


def offset_fetch_answer(response: Any) -> tuple[dict[tuple[str, int], int], list[type[KafkaError]]]:
    """An OffsetFetch answer (v1-v3): the committed offset of each partition that has one, and the errors it
    carries, the whole response's (v2+: the coordinator loading the group's offsets, or not the group's)
    among them; an answer with errors says nothing of what is committed."""
    codes = [getattr(response, "error_code", 0)]
    offsets = {}
    for topic, partitions in response.topics:
        for partition, offset, _metadata, code in partitions:
            codes.append(code)
            if offset >= 0:
                offsets[topic, partition] = offset
    return offsets, [for_code(code) for code in codes if for_code(code) is not NoError]


# -- the producer's hot path ----------------------------------------------------------------------------


def message_accumulator(producer: Any) -> Any:
    """Where `add_message(tp, key, value, timeout, timestamp_ms=)` puts a record in its partition's batch."""
    return producer._message_accumulator


def request_timeout(producer: Any) -> float:
    """Seconds a record may wait in the accumulator (what aiokafka's send passes it)."""
    return float(producer._request_timeout_ms) / 1000


def max_request_size(producer: Any) -> int:
    return int(producer._max_request_size)


def in_transaction(producer: Any) -> bool:
    """Whether a transactional producer has a transaction open (aiokafka's send refuses records otherwise)."""
    return bool(producer._txn_manager.is_in_transaction())


def waiting_batch(accumulator: Any, tps: Collection[TopicPartition]) -> Any | None:
    """The last batch still waiting to be sent of the first of `tps` that has one (None: none has): what
    aiokafka's `add_batch` waits on, one partition at a time, before it enqueues a batch."""
    batches = accumulator._batches
    for tp in tps:
        waiting = batches.get(tp)
        if waiting:
            return waiting[-1]
    return None


def enqueue_batches(accumulator: Any, batches: Collection[tuple[Any, TopicPartition]]) -> list[Any]:
    """Enqueue built batches (BatchBuilder, partition) all at once, with nothing awaited between them, and
    return their delivery futures (shielded, as `add_batch`'s). aiokafka's `add_batch` awaits before each
    batch, so a sender cancelled among them (an agent abandoned) leaves part of its records enqueued, then
    sends them again; this one enqueues all or, raising what `add_batch` raises (the producer closed, or
    failed), none. The caller waits for room first (`waiting_batch`) and checks the transaction is open:
    the accumulator adds each partition to it."""
    if accumulator._closed:
        raise ProducerClosed()
    if accumulator._exception is not None:
        raise copy.copy(accumulator._exception)
    return [asyncio.shield(accumulator._append_batch(builder, tp).future) for builder, tp in batches]


def retrieve_failures(producer: Any) -> None:
    """Mark as retrieved the failures aiokafka set on its own futures of a stopped producer: the drain
    waiter and future of each batch left in its accumulator, and its transaction's waiter."""
    accumulator = producer._message_accumulator
    batches = [*(batch for queue in accumulator._batches.values() for batch in queue),
               *accumulator._pending_batches]
    futures = [future for batch in batches for future in (batch._drain_waiter, batch.future)]
    txn_manager = producer._txn_manager
    if txn_manager is not None and txn_manager._transaction_waiter is not None:
        futures.append(txn_manager._transaction_waiter)
    for future in futures:
        if future.done() and not future.cancelled():
            future.exception()


def fail_metadata_waiters(client: Any) -> None:
    """Fail the metadata update a closed client left pending, and every later one (its sends waiting for
    a topic's metadata raise instead of waiting for ever): `force_metadata_update` makes a new update only
    while none is there, so a failed one left in place answers every later call."""
    waiting = client._md_update_fut
    if waiting is not None and not waiting.done():
        waiting.set_exception(KafkaConnectionError("the client was closed"))
    closed = asyncio.get_running_loop().create_future()
    closed.set_exception(KafkaConnectionError("the client was closed"))
    closed.exception()  # (read here: asyncio would log it unread if no send ever waits on it)
    client._md_update_fut = closed


# -- requests of our own --------------------------------------------------------------------------------


async def send_to_controller(admin: Any, request: Any) -> Any:
    """Send a request to the cluster's controller (CreateTopics must go there)."""
    return await admin._send_to_controller(request)


def network_client(admin: Any) -> Any:
    """The admin's AIOKafkaClient, which sends a request to a broker (`send(node, request)`)."""
    return admin._client


# -- no auto-creation, for engine's clients only ---------------------------------------------------------

_REFUSE = contextvars.ContextVar("engine_refuse_auto_create", default=False)


class _MetadataRequest(MetadataRequest):  # type: ignore[misc]  # aiokafka's protocol classes are untyped
    """aiokafka's metadata request, but for a request built inside an engine client's metadata update: that
    one never asks the broker to create the topics it names. Outside one, it is aiokafka's own, unchanged."""

    def __init__(self, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = None
                 ) -> None:
        if _REFUSE.get():
            allow_auto_topic_creation = False
        super().__init__(topics, allow_auto_topic_creation=allow_auto_topic_creation)


def _stand_in_for_metadata_request() -> None:
    """aiokafka's client builds its metadata requests with the name `MetadataRequest` of its module: put the
    class above there, once, when engine makes its first client (importing engine changes nothing of
    aiokafka). It behaves as aiokafka's own for every client that `refuse_auto_create` was not given."""
    if aiokafka.client.MetadataRequest is not _MetadataRequest:
        aiokafka.client.MetadataRequest = _MetadataRequest


def refuse_auto_create(client: Any) -> None:
    """Make every metadata request of `client` (an AIOKafkaClient: a producer's `client`, a consumer's or an
    admin's `_client`) say no to auto-creation: its metadata update runs with the flag set."""
    _stand_in_for_metadata_request()
    update = client._metadata_update

    async def metadata_update(cluster_metadata: Any, topics: Any) -> Any:
        token = _REFUSE.set(True)
        try:
            return await update(cluster_metadata, topics)
        finally:
            _REFUSE.reset(token)

    client._metadata_update = metadata_update


def consumer_client(consumer: Any) -> Any:
    """A consumer's AIOKafkaClient (for `refuse_auto_create`; a streams group's member sends with it)."""
    return consumer._client


def positions(consumer: Any) -> dict[Any, int]:
    """The position of every assigned partition that has one, without waiting: a streams group's member
    assigns partitions by hand, and aiokafka's `assign` forgets the positions of those it keeps (the public
    `position` waits for one, and is a coroutine per partition)."""
    subscription = consumer._subscription.subscription
    if subscription is None or subscription.assignment is None:
        return {}
    assignment = subscription.assignment
    found = {}
    for tp in assignment.tps:
        state = assignment.state_value(tp)
        if state.has_valid_position:
            found[tp] = state.position
    return found


@contextlib.contextmanager
def waiting_as_fetching(consumer: Any) -> Iterator[None]:
    """Within the block the consumer counts as fetching for its poll interval (aiokafka's
    `fetcher_idle_time` is 0), and its idle time counts from the block's end. As aiokafka's own
    `fetch_context` does, but restored however the block ends: that one, left by a cancellation, would
    count the consumer as fetching for good."""
    subscription = consumer._subscription
    subscription._fetch_count += 1
    try:
        yield
    finally:
        subscription._fetch_count -= 1
        if subscription._fetch_count == 0:
            subscription._last_fetch_ended = time.monotonic()


# -- a transaction's offsets committed as a group member --------------------------------------------------


class TxnOffsetCommitter(Protocol):
    """The request of a transaction's offset commit, and what its answer makes of the transaction."""

    def request(self, transactional_id: str, producer_id: int, producer_epoch: int,
                offsets: Mapping[tuple[str, int], int]) -> Any:
        """The TxnOffsetCommit request of these offsets ((topic, partition) -> offset)."""

    def answer(self, response: Any) -> tuple[dict[tuple[str, int], int], Exception | None]:
        """The error code of each partition, and the error that leaves the transaction only its abort (None
        for aiokafka to handle the codes as its own: committed, retried, or the producer fenced)."""


def commit_txn_offsets_as(producer: Any, committer: TxnOffsetCommitter) -> None:
    """Make the producer's transactional offset commits, from the next one on, send `committer`'s request.
    What follows is aiokafka's `Sender._do_txn_offset_commit` with the handler changed."""
    sender = producer._sender

    async def do_txn_offset_commit(offsets: Any, group_id: str) -> None:
        if not offsets:
            return
        try:
            node_id = await sender._find_coordinator(CoordinationType.GROUP, group_id)
        except GroupAuthorizationFailedError as exc:
            sender._txn_manager.error_transaction(exc)
            return
        await _TxnOffsetCommit(sender, offsets, group_id, committer).do(node_id)

    sender._do_txn_offset_commit = do_txn_offset_commit


class _TxnOffsetCommit(TxnOffsetCommitHandler):  # type: ignore[misc]  # aiokafka's classes are untyped
    """aiokafka's handler of the step (its sending and retries), with the committer's request and answer."""

    def __init__(self, sender: Any, offsets: Any, group_id: str, committer: TxnOffsetCommitter) -> None:
        super().__init__(sender, offsets, group_id)
        self._committer = committer

    def create_request(self) -> Any:
        txn_manager = self._sender._txn_manager
        offsets = {(tp.topic, tp.partition): at.offset for tp, at in self._offsets.items()}
        return self._committer.request(txn_manager.transactional_id, txn_manager.producer_id,
                                       txn_manager.producer_epoch, offsets)

    def handle_response(self, resp: Any) -> float | None:
        errors, refused = self._committer.answer(resp)
        if refused is not None:
            abortable(self._sender._txn_manager, refused)
            return None
        # aiokafka's reading of every code, given the answer in the shape of its own version's
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), code in errors.items():
            by_topic.setdefault(topic, []).append((partition, code))
        backoff: float | None = super().handle_response(_Answer(list(by_topic.items())))
        return backoff


class _Answer:
    """A TxnOffsetCommit answer as aiokafka's handler reads one: `errors`, [(topic, [(partition, code)])]."""

    def __init__(self, errors: list[tuple[str, list[tuple[int, int]]]]) -> None:
        self.errors = errors


def abortable(txn_manager: Any, exc: Exception) -> None:
    """aiokafka's `error_transaction` (the transaction can only be aborted; its waiters fail with `exc`),
    keeping the partitions and group the transaction holds on the broker: aiokafka forgets them, and then
    takes the abort of a transaction it thinks empty as done without sending EndTxn, which leaves the
    broker's transaction open, to be committed with the producer's next one."""
    partitions, group = set(txn_manager._txn_partitions), txn_manager._txn_consumer_group
    txn_manager.error_transaction(exc)
    txn_manager._txn_partitions |= partitions
    txn_manager._txn_consumer_group = group
