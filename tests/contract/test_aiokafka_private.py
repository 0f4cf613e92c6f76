"""The contract between engine and the private parts of the installed aiokafka it uses
(engine.transport.aiokafka_private and aiokafka_private_fetch): one test per use, each failing with a message
that names the use, so that an aiokafka release that changes one is found here and not in production. On the
real broker: engine's clients never auto-create a topic, while a user's own aiokafka clients in the same
process still do."""

from __future__ import annotations

import asyncio
import collections
import gc
import inspect
import struct
import subprocess
import sys
import uuid
import weakref
from typing import Any

import aiokafka
import aiokafka.client
import aiokafka.errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.consumer.fetcher import READ_COMMITTED, Fetcher, FetchResult, PartitionRecords
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.producer.message_accumulator import MessageAccumulator
from aiokafka.producer.sender import BaseHandler, Sender, TxnOffsetCommitHandler
from aiokafka.producer.transaction_manager import TransactionManager, TransactionResult, TransactionState
from aiokafka.protocol.commit import OffsetFetchResponse_v3
from aiokafka.record.default_records import DefaultRecordBase, DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata, TopicPartition

from engine.events import TP
from engine.transport import aiokafka_private as private
from engine.transport import aiokafka_private_fetch, open_transport
from engine.transport.base import ClientTuning, TopicSpec

CHANGED = "aiokafka changed what engine.transport.aiokafka_private relies on for "


def has_method(owner: Any, name: str, *params: str, coroutine: bool = False) -> None:
    """`owner.name` exists, takes `params` (in that order, first ones), and is a coroutine if said."""
    method = getattr(owner, name, None)
    assert callable(method), f"{CHANGED}{owner.__name__}.{name}: gone"
    found = [p for p in inspect.signature(method).parameters if p != "self"]
    assert found[:len(params)] == list(params), f"{CHANGED}{owner.__name__}.{name}: takes {found}"
    if coroutine:
        assert inspect.iscoroutinefunction(method), f"{CHANGED}{owner.__name__}.{name}: not a coroutine"


def test_the_group_coordinator_answers_a_heartbeat_and_keeps_the_generation():
    has_method(GroupCoordinator, "_do_heartbeat", coroutine=True)
    has_method(GroupCoordinator, "request_rejoin")
    source = inspect.getsource(GroupCoordinator)
    assert "self.generation" in source, f"{CHANGED}GroupCoordinator.generation"
    assert "def reset_generation" in source, f"{CHANGED}the generation reset of an unknown member"
    assert private.NO_GENERATION == -1, f"{CHANGED}the generation of an unknown member"


async def test_a_started_consumer_in_a_group_has_its_coordinator_where_engine_reads_it():
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", group_id="g")
    assert hasattr(consumer, "_coordinator"), f"{CHANGED}AIOKafkaConsumer._coordinator"
    assert private.group_coordinator(consumer) is None, "not started: no coordinator"
    assert isinstance(private.consumer_client(consumer), AIOKafkaClient), f"{CHANGED}AIOKafkaConsumer._client"


class Answers:
    """A group coordinator (what `committed_offsets` uses of aiokafka's) whose OffsetFetch answers are given:
    OffsetFetch v3 responses, as aiokafka's protocol classes decode them."""

    group_id = "g"

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.dead = 0
        self.asked: list[Any] = []

    async def ensure_coordinator_known(self) -> None: ...

    async def _send_req(self, request: Any) -> Any:
        self.asked.append(request)
        return self.answers.pop(0)

    def coordinator_dead(self) -> None:
        self.dead += 1


LOADING, NOT_COORDINATOR = 14, 16  # OffsetFetch's errors for a whole response (v2+)


async def test_committed_offsets_wait_for_a_coordinator_that_can_answer():
    """aiokafka's own fetch reads an answer with an error for the whole response (the coordinator is loading
    the group's offsets after a broker restarted, or is not the group's any more: no partitions in it) as
    "nothing committed"; engine's asks again until the coordinator answers."""
    tp = aiokafka.TopicPartition("t", 0)
    loading = OffsetFetchResponse_v3(0, [], LOADING)
    assert await GroupCoordinator._do_fetch_commit_offsets(Answers(loading), [tp]) == {}, (
        f"{CHANGED}OffsetFetch: aiokafka now reads the whole response's error (engine's own fetch may go)")
    has_method(GroupCoordinator, "_send_req", "request", coroutine=True)
    has_method(GroupCoordinator, "ensure_coordinator_known", coroutine=True)
    has_method(GroupCoordinator, "coordinator_dead")
    coordinator = Answers(loading, OffsetFetchResponse_v3(0, [], NOT_COORDINATOR),
                          OffsetFetchResponse_v3(0, [("t", [(0, 42, "", 0), (1, -1, "", 0)])], 0))
    found = await private.committed_offsets(coordinator, [tp, aiokafka.TopicPartition("t", 1)])
    assert found == {("t", 0): 42}, "a partition never committed is not there"
    assert len(coordinator.asked) == 3
    assert coordinator.dead == 1, "a coordinator that is not the group's is looked for anew"
    denied = Answers(OffsetFetchResponse_v3(0, [], 30))  # GROUP_AUTHORIZATION_FAILED: not retried
    with pytest.raises(aiokafka.errors.GroupAuthorizationFailedError):
        await private.committed_offsets(denied, [tp])


class AdminAnswers:
    """An admin client whose OffsetFetch answers are given (OffsetFetch v3 responses, as aiokafka decodes
    them), and whose coordinator lookups are counted."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.lookups = 0
        self.asked: list[tuple[Any, Any]] = []

    async def find_coordinator(self, group_id: str) -> int:
        self.lookups += 1
        return 7

    async def _send_request(self, request: Any, node_id: Any = None) -> Any:
        self.asked.append((request, node_id))
        return self.answers.pop(0)


async def test_an_admins_group_offsets_wait_for_a_coordinator_that_can_answer():
    """aiokafka's admin reads an answer with an error for the whole response as "nothing committed"
    (`list_consumer_group_offsets`): `engine status` would show none, and `engine reset --shift-by` shift
    from the log's start. engine asks the coordinator through the admin's request sender until it answers."""
    loading = OffsetFetchResponse_v3(0, [], LOADING)
    assert await AIOKafkaAdminClient.list_consumer_group_offsets(AdminAnswers(loading), "g", 7) == {}, (
        f"{CHANGED}the admin's OffsetFetch: it now reads the whole response's error (engine's may go)")
    has_method(AIOKafkaAdminClient, "_send_request", "request", "node_id", coroutine=True)
    has_method(AIOKafkaAdminClient, "find_coordinator", "group_id", coroutine=True)
    admin = AdminAnswers(loading, OffsetFetchResponse_v3(0, [], NOT_COORDINATOR),
                         OffsetFetchResponse_v3(0, [("t", [(0, 42, "", 0), (1, 9, "", 0)])], 0))
    found = await private.committed_offsets(private.AdminCoordinator(admin, "g"), None)
    assert found == {("t", 0): 42, ("t", 1): 9}
    assert [node for _, node in admin.asked] == [7, 7, 7]
    assert admin.lookups == 2, "a coordinator that is not the group's is looked for anew"
    assert admin.asked[0][0]._partitions is None, "every partition the group committed"


async def test_a_wait_counts_as_a_fetch_on_the_clock_aiokafkas_poll_interval_check_reads():
    """aiokafka's heartbeat leaves the group once `fetcher_idle_time` passes `max_poll_interval`; within
    `waiting_as_fetching` that idle time is 0, and it counts again from the block's end."""
    assert "fetcher_idle_time" in inspect.getsource(GroupCoordinator._heartbeat_routine), \
        f"{CHANGED}GroupCoordinator._heartbeat_routine (what it reads for the poll interval)"
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9")
    subscription = consumer._subscription
    subscription._last_fetch_ended -= 60  # (a minute without a fetch)
    assert subscription.fetcher_idle_time >= 60
    with private.waiting_as_fetching(consumer):
        assert subscription.fetcher_idle_time == 0, f"{CHANGED}SubscriptionState._fetch_count"
    assert subscription.fetcher_idle_time < 60, f"{CHANGED}SubscriptionState._last_fetch_ended"
    with pytest.raises(asyncio.CancelledError), private.waiting_as_fetching(consumer):
        raise asyncio.CancelledError
    subscription._last_fetch_ended -= 60
    assert subscription.fetcher_idle_time >= 60, "a cancelled wait left the consumer counted as fetching"


async def test_the_producer_hot_path_finds_the_accumulator_timeouts_and_the_transaction_state():
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", transactional_id="t",
                                enable_idempotence=True, request_timeout_ms=1234, max_request_size=5678)
    accumulator = private.message_accumulator(producer)
    assert isinstance(accumulator, MessageAccumulator), f"{CHANGED}AIOKafkaProducer._message_accumulator"
    has_method(MessageAccumulator, "add_message", "tp", "key", "value", "timeout", "timestamp_ms",
               coroutine=True)
    assert private.request_timeout(producer) == 1.234, f"{CHANGED}AIOKafkaProducer._request_timeout_ms"
    assert private.max_request_size(producer) == 5678, f"{CHANGED}AIOKafkaProducer._max_request_size"
    assert isinstance(producer._txn_manager, TransactionManager), f"{CHANGED}AIOKafkaProducer._txn_manager"
    has_method(TransactionManager, "is_in_transaction")
    assert private.in_transaction(producer) is False, "no transaction begun"
    assert isinstance(producer.client, AIOKafkaClient), "AIOKafkaProducer.client"


async def test_a_run_of_batches_is_enqueued_at_once_behind_the_room_aiokafka_waits_for():
    """`enqueue_batches` appends built batches to the accumulator's queues as `add_batch` does once it has
    room (the partition joining the open transaction), awaiting nothing; `waiting_batch` finds the batch
    `add_batch` would wait on; a closed or failed accumulator refuses the whole run."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", transactional_id="t",
                                enable_idempotence=True)
    accumulator = private.message_accumulator(producer)
    has_method(MessageAccumulator, "_append_batch", "builder", "tp")
    has_method(aiokafka.producer.message_accumulator.MessageBatch, "wait_drain", "timeout", coroutine=True)
    producer._txn_manager.set_pid_and_epoch(1, 0)
    producer._txn_manager.begin_transaction()
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert private.waiting_batch(accumulator, tps) is None
    builders = [producer.create_batch() for _ in range(3)]
    for builder in builders:
        builder.append(key=b"k", value=b"v", timestamp=None)
    sent = private.enqueue_batches(accumulator, [(builders[0], tps[1]), (builders[1], tps[1]),
                                                 (builders[2], tps[0])])
    assert [len(accumulator._batches[tp]) for tp in tps] == [1, 2], f"{CHANGED}MessageAccumulator._batches"
    assert private.waiting_batch(accumulator, tps[1:])._builder is builders[1], f"{CHANGED}MessageBatch"
    assert all(isinstance(future, asyncio.Future) and not future.done() for future in sent)
    joined = set(producer._txn_manager._pending_txn_partitions)
    assert joined == set(tps), f"{CHANGED}the partitions of the transaction"
    accumulator._batches.clear()
    accumulator._exception = aiokafka.errors.KafkaConnectionError("failed")
    with pytest.raises(aiokafka.errors.KafkaConnectionError):
        private.enqueue_batches(accumulator, [(producer.create_batch(), tps[0])])
    accumulator._exception = None
    await accumulator.close()
    with pytest.raises(aiokafka.errors.ProducerClosed):
        private.enqueue_batches(accumulator, [(producer.create_batch(), tps[0])])
    assert not accumulator._batches[tps[0]], f"{CHANGED}MessageAccumulator._closed"
    for future in sent:
        future.cancel()


async def test_the_failures_a_fenced_producer_sets_on_its_own_futures_are_retrieved(caplog):
    """A fenced transaction fails the batches left in the accumulator: aiokafka sets the failure on each
    batch's drain waiter and on the transaction's waiter, which nobody awaits; unretrieved, asyncio logs
    each one when it is collected."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", transactional_id="t",
                                enable_idempotence=True)
    accumulator = private.message_accumulator(producer)
    assert isinstance(producer._txn_manager, TransactionManager), f"{CHANGED}AIOKafkaProducer._txn_manager"
    producer._txn_manager.set_pid_and_epoch(1, 0)  # what the sender does once the broker gave them
    producer._txn_manager.begin_transaction()
    sent = await accumulator.add_message(aiokafka.TopicPartition("t", 0), b"k", b"v", 5)
    fenced = aiokafka.errors.ProducerFenced()
    accumulator.fail_all(fenced)  # what the sender does when it dies of a fence
    producer._txn_manager.fatal_error(fenced)
    batch = next(iter(accumulator._batches.values()))[0]
    waiters = [batch._drain_waiter, batch.future, producer._txn_manager._transaction_waiter]
    assert all(w.done() for w in waiters), f"{CHANGED}the futures a failed batch and transaction set"
    sent.exception()  # engine's own (engine.transport.deliveries)
    private.retrieve_failures(producer)
    del sent, batch, waiters
    producer._message_accumulator._batches.clear()
    producer._txn_manager._transaction_waiter = None
    with caplog.at_level("ERROR", logger="asyncio"):
        gc.collect()
        await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text, f"{CHANGED}where a failed producer's futures are"


async def test_a_closed_client_leaves_a_metadata_wait_pending_and_engine_fails_it():
    client = AIOKafkaClient(bootstrap_servers="127.0.0.1:9")
    waiting = asyncio.ensure_future(client.force_metadata_update())
    await asyncio.sleep(0)
    await client.close()
    await asyncio.sleep(0.01)
    assert not waiting.done(), f"{CHANGED}a closed client's pending metadata update (now resolved by close?)"
    private.fail_metadata_waiters(client)
    with pytest.raises(aiokafka.errors.KafkaConnectionError):
        await asyncio.wait_for(waiting, 1)
    # A send that was between two tries (asleep after an update that found nothing) asks again once the
    # client is closed: that update fails at once too, instead of waiting for a synchroniser that is gone.
    with pytest.raises(aiokafka.errors.KafkaConnectionError):
        await asyncio.wait_for(client.force_metadata_update(), 1)


async def test_the_admin_sends_requests_of_its_own_to_the_controller_and_to_a_broker():
    admin = AIOKafkaAdminClient(bootstrap_servers="127.0.0.1:9")
    has_method(AIOKafkaAdminClient, "_send_to_controller", "request", coroutine=True)
    client = private.network_client(admin)
    assert isinstance(client, AIOKafkaClient), f"{CHANGED}AIOKafkaAdminClient._client"
    has_method(AIOKafkaClient, "send", "node_id", "request", coroutine=True)
    has_method(AIOKafkaClient, "get_random_node")


def test_metadata_requests_are_built_where_engine_says_no_to_auto_creation():
    has_method(AIOKafkaClient, "_metadata_update", "cluster_metadata", "topics", coroutine=True)
    source = inspect.getsource(AIOKafkaClient._metadata_update)
    assert "MetadataRequest(" in source, f"{CHANGED}how AIOKafkaClient builds its metadata requests"
    private.refuse_auto_create(type("Client", (), {"_metadata_update": None})())  # (an engine client made)
    assert aiokafka.client.MetadataRequest is private._MetadataRequest, "engine's request stands there"
    built = aiokafka.client.MetadataRequest(["t"])
    assert built._allow_auto_topic_creation is None, "outside an engine client: aiokafka's own default"


async def test_an_engine_client_refuses_auto_creation_and_other_clients_are_left_alone():
    seen: list[bool | None] = []

    class Recording:
        async def _metadata_update(self, cluster_metadata: Any, topics: Any) -> None:
            seen.append(aiokafka.client.MetadataRequest(list(topics))._allow_auto_topic_creation)

    engines, users = Recording(), Recording()
    private.refuse_auto_create(engines)
    await engines._metadata_update(None, ["t"])
    await users._metadata_update(None, ["t"])
    await asyncio.gather(engines._metadata_update(None, ["t"]), users._metadata_update(None, ["t"]))
    assert seen == [False, None, False, None]


@pytest.mark.kafka
async def test_a_users_own_aiokafka_producer_still_auto_creates_topics_beside_engines_clients(kafka):
    transport = open_transport(kafka.url, {})
    engine_producer = transport.producer()
    await engine_producer.start()
    refused, created = f"refused-{uuid.uuid4().hex[:8]}", f"created-{uuid.uuid4().hex[:8]}"
    users = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap)
    await users.start()
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011  # aiokafka's timeout: the topic never appears
            await asyncio.wait_for(engine_producer.send(refused, None, b"x"), 5)
        await users.send_and_wait(created, b"x")  # the broker creates it (auto.create.topics.enable)
    finally:
        await users.stop()
        await engine_producer.stop()
    admin = transport.admin()
    try:
        topics = await admin.describe_topics()
    finally:
        await admin.close()
    assert created in topics
    assert refused not in topics


def test_a_transactions_offset_commit_step_builds_its_handler_where_engine_gives_its_own():
    has_method(Sender, "_do_txn_offset_commit", "offsets", "group_id", coroutine=True)
    has_method(Sender, "_find_coordinator", "coordinator_type", "coordinator_key", coroutine=True)
    assert "self._do_txn_offset_commit(" in inspect.getsource(Sender._maybe_do_transactional_request), (
        f"{CHANGED}where the sender commits a transaction's offsets")
    step = inspect.getsource(Sender._do_txn_offset_commit)
    for copied in ("_find_coordinator(CoordinationType.GROUP, group_id)", "GroupAuthorizationFailedError",
                   "error_transaction(exc)", "TxnOffsetCommitHandler(self, offsets, group_id)"):
        assert copied in step, f"{CHANGED}Sender._do_txn_offset_commit (commit_txn_offsets_as copies it)"
    has_method(TxnOffsetCommitHandler, "__init__", "sender", "offsets", "group_id")
    has_method(BaseHandler, "do", "node_id", coroutine=True)
    do = inspect.getsource(BaseHandler.do)
    assert "self.create_request()" in do, f"{CHANGED}BaseHandler.do"
    assert "self.handle_response(resp)" in do, f"{CHANGED}BaseHandler.do"
    assert "resp.errors" in inspect.getsource(TxnOffsetCommitHandler.handle_response), (
        f"{CHANGED}how TxnOffsetCommitHandler reads an answer")


class Committer:
    """A transactional offset commit's request and answer, as kafka_txn_offsets gives them: the answer is
    the codes the test chose, refused when the test says so."""

    def __init__(self, refused: Exception | None = None) -> None:
        self.requests: list[tuple[Any, ...]] = []
        self.refused = refused

    def request(self, transactional_id: str, producer_id: int, producer_epoch: int,
                offsets: dict[tuple[str, int], int]) -> Any:
        self.requests.append((transactional_id, producer_id, producer_epoch, offsets))
        return "request"

    def answer(self, response: Any) -> tuple[dict[tuple[str, int], int], Exception | None]:
        return response, self.refused


def open_transaction(producer: AIOKafkaProducer, answers: list[dict[tuple[str, int], int]]) -> Any:
    """A transaction holding a record of out[0] and the group "g", as the sender leaves it after
    AddPartitionsToTxn and AddOffsetsToTxn; the group coordinator found, its answers the test's."""
    txn_manager = producer._txn_manager
    txn_manager.begin_transaction()
    txn_manager.maybe_add_partition_to_txn(aiokafka.TopicPartition("out", 0))
    txn_manager.partition_added(aiokafka.TopicPartition("out", 0))
    offsets = {aiokafka.TopicPartition("in", 0): OffsetAndMetadata(5, ""),
               aiokafka.TopicPartition("in", 1): OffsetAndMetadata(7, "")}
    committed = txn_manager.add_offsets_to_txn(offsets, "g")
    txn_manager.consumer_group_added("g")
    sender = producer._sender
    sender._coordinators[CoordinationType.GROUP] = 0

    async def send(node_id: int, request: Any, group: Any = None) -> Any:
        return answers.pop(0)

    sender.client.send = send
    return committed


async def test_a_transactions_offsets_go_in_engines_request_with_aiokafkas_retries():
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", transactional_id="t",
                                enable_idempotence=True, retry_backoff_ms=1)
    producer._txn_manager.set_pid_and_epoch(3, 1)
    loading = {("in", 0): 14, ("in", 1): 14}  # COORDINATOR_LOAD_IN_PROGRESS: aiokafka tries again
    committed = open_transaction(producer, [loading, {("in", 0): 0, ("in", 1): 0}])
    committer = Committer()
    private.commit_txn_offsets_as(producer, committer)
    sender = producer._sender
    txn_manager = producer._txn_manager
    while (commit := txn_manager.offsets_to_commit()) is not None:
        await sender._do_txn_offset_commit(*commit)
    await committed
    assert committer.requests == [("t", 3, 1, {("in", 0): 5, ("in", 1): 7})] * 2
    await producer.stop()


async def test_a_refused_transaction_keeps_what_it_holds_so_that_its_abort_reaches_the_broker():
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9", transactional_id="t",
                                enable_idempotence=True)
    producer._txn_manager.set_pid_and_epoch(3, 1)
    committed = open_transaction(producer, [{("in", 0): 22, ("in", 1): 22}])
    refused = RuntimeError("refused")
    private.commit_txn_offsets_as(producer, Committer(refused))
    await producer._sender._do_txn_offset_commit(*producer._txn_manager.offsets_to_commit())
    with pytest.raises(RuntimeError, match="refused"):
        await committed
    txn_manager = producer._txn_manager
    assert txn_manager.state is TransactionState.ABORTABLE_ERROR, f"{CHANGED}an abortable error's state"
    # aiokafka's abort sends EndTxn only for a transaction it does not think empty
    assert "is_empty_transaction()" in inspect.getsource(Sender._do_txn_commit), f"{CHANGED}the abort"
    assert not txn_manager.is_empty_transaction(), "the abort of a refused transaction would not be sent"
    txn_manager.aborting_transaction()
    assert txn_manager.needs_transaction_commit() is TransactionResult.ABORT
    private.retrieve_failures(producer)
    await producer.stop()


class Position:
    """A partition's state as a FetchResult reads and moves it (SubscriptionState's TopicPartitionState)."""

    def __init__(self, position: int) -> None:
        self.position, self.paused = position, False

    def consumed_to(self, position: int) -> None:
        self.position = position


class Assignment:
    active = True

    def __init__(self, position: int) -> None:
        self.state = Position(position)

    def state_value(self, tp: Any) -> Position:
        return self.state


def batches(*sizes: int, compacted: int = 0) -> bytes:
    """Record batches of `sizes` records, offsets following on from 0; each batch's last `compacted`
    offsets gone (a compacted log: the batch ends past its last record)."""
    data, offset = b"", 0
    for size in sizes:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        for at in range(size):
            builder.append(at, timestamp=1000 + offset, key=b"k%d" % offset, value=b"v%d" % offset,
                           headers=[("h", b"x")])
            offset += 1
        built = bytearray(builder.build())
        built[0:8] = (offset - size).to_bytes(8, "big")  # the batch's base offset
        if compacted:
            struct.pack_into(">i", built, LAST_OFFSET_DELTA, size - 1 + compacted)
            struct.pack_into(">I", built, DefaultRecordBase.CRC_OFFSET,
                             calc_crc32c(bytes(built[DefaultRecordBase.ATTRIBUTES_OFFSET:])))
            offset += compacted
        data += bytes(built)
    return data


LAST_OFFSET_DELTA = struct.calcsize(">qiibIh")  # (base offset, length, leader epoch, magic, CRC, attributes)


def reads(result: FetchResult, max_records: int | None) -> list[tuple[list[tuple[Any, ...]], int]]:
    """Each `getall` while the result has more (as the fetcher asks): what it returned, and the position
    after it."""
    calls = []
    while result.has_more():
        got = result.getall(max_records)
        calls.append(([(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got],
                      result._assignment.state.position))
    return calls


def bare_results() -> Any:
    """The fetch results dict of a consumer engine made bare (a fetcher of its own: nothing is started)."""
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9")

    class Fetching:
        _records: Any = collections.OrderedDict()

    consumer._fetcher = Fetching()
    aiokafka_private_fetch.bare_records(consumer)
    return consumer._fetcher._records


def fetch_result(data: bytes, fetch_offset: int = 0) -> FetchResult:
    """What aiokafka's fetcher stores of a partition's fetched `data`, to be read from `fetch_offset`."""
    tp = TopicPartition("t", 0)
    records = PartitionRecords(tp, MemoryRecords(data), [], fetch_offset, None, None, True, READ_COMMITTED)
    return FetchResult(tp, assignment=Assignment(fetch_offset), partition_records=records, backoff=0)


async def test_a_fetch_read_a_batch_at_a_time_returns_what_aiokafka_returns_and_moves_the_position_alike():
    assert aiokafka_private_fetch.batch_reader_misfit() is None, "the check a consumer makes at start"
    for name in ("check_assignment", "has_more", "_update_position", "getall"):
        assert hasattr(FetchResult, name), f"{CHANGED}FetchResult.{name}"
    for name in ("_consume_aborted_up_to", "_contains_abort_marker"):
        has_method(PartitionRecords, name)
    assert "self._records[tp] = FetchResult(" in inspect.getsource(Fetcher), f"{CHANGED}Fetcher._records"
    source = inspect.getsource(PartitionRecords)
    for name in ("self._records", "self.next_fetch_offset", "self._check_crcs", "self._isolation_level",
                 "self._aborted_producers", "self._tp", "self._records_iterator"):
        assert name in source, f"{CHANGED}PartitionRecords: {name}"
    consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9")
    for name in ("_fetcher", "_key_deserializer", "_value_deserializer"):
        assert hasattr(consumer, name), f"{CHANGED}AIOKafkaConsumer.{name}"
    results, tp = bare_results(), TopicPartition("t", 0)
    for data, end in ((batches(4, 3, 5), 12), (batches(4, 3, 5, compacted=2), 18)):
        for fetch_offset in (0, 2, 4, 11):
            for max_records in (None, 1, 2, 3, 5, 100):
                theirs = reads(fetch_result(data, fetch_offset), max_records)
                results[tp] = fetch_result(data, fetch_offset)
                ours = reads(results[tp], max_records)
                assert ours == theirs, (end, fetch_offset, max_records)
                assert ours[-1][1] == end
    data = batches(4, 3, 5)
    theirs = fetch_result(data).getall()
    assert all(isinstance(r, ConsumerRecord) for r in theirs), f"{CHANGED}what a fetch returns"
    results[tp] = fetch_result(data)
    assert not any(isinstance(r, ConsumerRecord) for r in results[tp].getall())


async def test_a_fetch_read_to_its_end_is_freed_without_the_cyclic_garbage_collector():
    results, tp = bare_results(), TopicPartition("t", 0)
    gc.disable()
    try:
        results[tp] = fetched = fetch_result(batches(4, 3))
        freed = weakref.ref(fetched._partition_records)
        assert len(fetched.getall()) == 7
        del results[tp], fetched
        assert freed() is None, "a fetch read to its end waits for the cyclic garbage collector"
    finally:
        gc.enable()


async def test_a_corrupt_batch_ends_the_fetch_as_aiokafkas_reading_does():
    results, tp = bare_results(), TopicPartition("t", 0)
    corrupt = bytearray(batches(2, 2, 2))
    corrupt[len(corrupt) * 1 // 2] ^= 0xFF  # (a byte of the second batch's records)
    for name in ("theirs", "ours"):
        fetched = fetch_result(bytes(corrupt))
        if name == "ours":
            results[tp] = fetched
        assert [r.offset for r in fetched.getall(1)] == [0]
        assert [r.offset for r in fetched.getall(1)] == [1]
        with pytest.raises(aiokafka.errors.CorruptRecordException):
            fetched.getall(1)
        assert fetched.getall(1) == [], f"{name}: the fetch goes on past a corrupt batch"
        assert not fetched.has_more(), name
        assert fetched._assignment.state.position == 2, name


@pytest.mark.kafka
@pytest.mark.parametrize("reading", ["batches", "getmany", "misfit"])
async def test_engines_consumer_reads_the_records_without_the_aborted_transactions_ones(
        kafka, reading: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Read a batch at a time (bare records), or through aiokafka's public getmany: asked for by the setting
    (`fetch_batches=False`), or because the batch reader does not fit the installed aiokafka (a warning
    names what changed, once per process): the same records either way."""
    if reading == "misfit":
        monkeypatch.setattr(aiokafka_private_fetch, "batch_reader_misfit", lambda: "FetchResult.getall")
        aiokafka_private_fetch._say_misfit.cache_clear()
    topic = f"bare-{uuid.uuid4().hex[:8]}"
    transport = open_transport(kafka.url, {}, ClientTuning(fetch_batches=reading != "getmany"))
    admin = transport.admin()
    try:
        await admin.create_topics([TopicSpec(topic, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, transactional_id=f"{topic}-txn")
    await producer.start()
    try:
        for number, commit in enumerate((True, False, True)):
            async with producer.transaction() if commit else Aborted(producer):
                headers = [("n", b"%d" % number)]
                await producer.send_and_wait(topic, b"v%d" % number, key=b"k", headers=headers)
    finally:
        await producer.stop()
    got: list[Any] = []
    for _ in range(2):  # (a second consumer: the misfit is said once per process)
        consumer = transport.consumer(group_id=None)
        consumer.assign([TP(topic, 0)])
        await consumer.start()
        got = []
        try:
            async with asyncio.timeout(30):
                while len(got) < 2:
                    got += (await consumer.getmany(1.0, 100)).get(TP(topic, 0), [])
        finally:
            await consumer.stop()
        assert [(r.key, r.value, list(r.headers)) for r in got] == [(b"k", b"v0", [("n", b"0")]),
                                                                    (b"k", b"v2", [("n", b"2")])]
    bare = not any(isinstance(r, ConsumerRecord) for r in got)
    assert bare == (reading == "batches"), "a batch at a time: no ConsumerRecord made"
    warned = [m for r in caplog.records if "does not fit the installed aiokafka" in (m := r.getMessage())]
    if reading == "misfit":
        assert len(warned) == 1, warned
        assert "(FetchResult.getall changed)" in warned[0]
    else:
        assert warned == []


class Aborted:
    """A transaction aborted at the end of its block."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer

    async def __aenter__(self) -> None:
        await self.producer.begin_transaction()

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.abort_transaction()


def test_importing_engine_leaves_aiokafka_as_it_is() -> None:
    """Engine's metadata request stands in aiokafka's module only once engine makes a client."""
    code = ("import aiokafka.client; original = aiokafka.client.MetadataRequest; import engine, "
            "engine.transport.kafka; assert aiokafka.client.MetadataRequest is original")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
