"""The Kafka transport's producer: sends straight into aiokafka's accumulator when engine knows what
aiokafka would check, runs of records as whole batches, transactions, and every delivery checked at the
flush.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import (
    IllegalOperation,
    KafkaError,
)
from aiokafka.errors import ProducerFenced as KafkaProducerFenced

from engine.errors import (
    DeliveryFailed,
    MembershipLost,
    ProducerFenced,
    RecordTooLarge,
    TransactionAborted,
)
from engine.partitioner import KeyHashes
from engine.transport import aiokafka_private as private
from engine.transport.deliveries import Deliveries, first_failure
from engine.transport.kafka_connect import start_client, stop_quietly
from engine.transport.kafka_txn_offsets import send_offsets_as_member

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from engine.events import TP, Headers
    from engine.transport.base import KeyedRecord
    from engine.transport.kafka_streams_member import (
        StreamsMember,
    )

log = logging.getLogger(__name__)


DIRECT_MARGIN = 4096  # bytes under max_request_size below which a record surely fits, with its headers


class KafkaProducer:
    """With a transactional id, every send goes into the open transaction; `commit_transaction` commits it
    with the source offsets and opens the next, and sends made meanwhile wait for the next one (a gate),
    since aiokafka refuses sends while a transaction is committing."""

    def __init__(self, servers: str, options: Mapping[str, Any], transactional_id: str | None = None,
                 linger: float = 0.0, transaction_timeout: float = 15.0,
                 members: Mapping[str, StreamsMember] | None = None) -> None:
        """`members`: the streams groups' members of this process, by group id (the transport's): a
        transaction's offsets for one of those groups are committed as its member."""
        self._servers = servers
        self._members: Mapping[str, StreamsMember] = members if members is not None else {}
        self._options = options
        transactions: dict[str, Any] = {}
        if transactional_id is not None:
            transactions = {"transactional_id": transactional_id, "enable_idempotence": True,
                            "transaction_timeout_ms": round(transaction_timeout * 1000)}
        self._client = AIOKafkaProducer(
            bootstrap_servers=servers,
            acks="all",
            linger_ms=round(linger * 1000),
            max_batch_size=256 * 1024,
            **transactions,
            **options,
        )
        self._transactional = transactional_id is not None
        self._transaction_timeout = transaction_timeout
        self._begun_in: dict[str, int] = {}  # group id -> its member's generation when the transaction began
        self._open = asyncio.Event()
        if not self._transactional:
            self._open.set()
        self._deliveries = Deliveries()  # sends since the last flush, checked there
        # A keyed record's partition is picked here, from the topic's partitions in the client's metadata
        # (forgotten whenever the metadata changes) and a cache of key hashes (engine.partitioner).
        self._hashes = KeyHashes()
        self._partitions: dict[str, list[TopicPartition]] = {}
        self._client.client.cluster.add_listener(self._metadata_changed)
        # Records bound for a known partition go straight into aiokafka's accumulator (see `send`).
        self._accumulator = private.message_accumulator(self._client)
        self._timeout = private.request_timeout(self._client)
        self._direct_size = private.max_request_size(self._client) - DIRECT_MARGIN
        private.refuse_auto_create(self._client.client)

    async def start(self) -> None:
        await start_client(self._client, self._servers, self._options)
        if self._transactional:
            await self._begin_transaction()
        self._open.set()

    async def _begin_transaction(self) -> None:
        await self._client.begin_transaction()
        self._begun_in = {group_id: member.generation for group_id, member in self._members.items()}

    async def stop(self) -> None:
        # aiokafka's stop first delivers what it holds, as long as that takes; with the broker it needs away
        # (a transaction's coordinator not found), for ever. Bounded: by the transaction timeout (the broker
        # aborts the transaction by then), else by the request timeout (a batch fails by then). What was not
        # delivered belongs to offsets not committed: it is processed and sent again.
        within = self._transaction_timeout if self._transactional else self._timeout
        await stop_quietly(self._client, "producer", within, left="with sends undelivered (their records' "
                            "offsets were not committed: processed again)")
        # A send still waiting for a topic's metadata would wait for ever on the closed client: it fails,
        # and its agent's event (of a task lost or closed, hence this stop) is dropped for the new owner.
        private.fail_metadata_waiters(self._client.client)
        # Sends never flushed (a fenced or abandoned transaction's): what they failed with is known and
        # handled already (the commit failed), so it is retrieved here, never logged by asyncio as unseen;
        # so is what aiokafka set on futures of its own for the same failure.
        private.retrieve_failures(self._client)
        sent, _ = self._deliveries.take()
        for future in sent:
            if future.done():
                first_failure([future])
            else:
                future.add_done_callback(lambda done: first_failure([done]))

    @property
    def transactional(self) -> bool:
        return self._transactional

    def for_partition(self, number: int) -> KafkaProducer:
        return self

    async def commit_transaction(self, offsets: Mapping[TP, int], group_id: str) -> None:
        """Commit the open transaction with `offsets`, and open the next. Bounded by the transaction timeout
        (past it the broker has aborted the transaction anyway): aiokafka waits for a transaction coordinator
        for as long as none is found, and a commit that waits holds its task's sends and its worker's
        checkpoint, and through them any revocation. Raises DeliveryFailed (the task is then rewound, its
        producer replaced) or ProducerFenced."""
        self._open.clear()
        try:
            async with asyncio.timeout(self._transaction_timeout):
                await self._commit_transaction(offsets, group_id)
        except TimeoutError as exc:
            raise DeliveryFailed(f"the transaction did not commit within the transaction timeout "
                                 f"({self._transaction_timeout:.0f} s; the broker aborts it)") from exc
        finally:
            self._open.set()

    async def _commit_transaction(self, offsets: Mapping[TP, int], group_id: str) -> None:
        try:
            # Every record of the transaction acknowledged first: aiokafka sends EndTxn as soon as it is
            # asked to, with batches still in flight or waiting to be retried (NotEnoughReplicas), which
            # then land after the commit marker, outside the transaction that holds their offsets.
            await self.flush()
            if offsets:
                positions = {TopicPartition(tp.topic, tp.partition): at for tp, at in offsets.items()}
                member = self._members.get(group_id)
                if member is None:
                    await self._client.send_offsets_to_transaction(positions, group_id)
                else:  # a streams group's member: the group refuses the offsets of one it fenced
                    # A member that lost its tasks (fenced, or its coordinator silent past the session)
                    # joins again under a new epoch, which the group would take these offsets with: they
                    # were processed under the old one, whose tasks are gone, so they are refused here.
                    if member.epoch <= 0 or member.generation != self._begun_in.get(group_id,
                                                                                    member.generation):
                        raise MembershipLost(f"this worker lost its tasks in its streams group {group_id!r} "
                                             "since the transaction began: its offsets are no longer its to "
                                             "commit")
                    await send_offsets_as_member(self._client, positions, group_id, member.member_id,
                                                 member.epoch, member.instance_id)
            await self._client.commit_transaction()
            await self._begin_transaction()
        except KafkaProducerFenced as exc:
            raise ProducerFenced(f"transaction fenced: a newer producer took over this id ({exc})") from exc
        except KafkaError as exc:
            raise DeliveryFailed(f"the transaction could not be committed: {exc!r}") from exc

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
        if not self._open.is_set():
            await self._open.wait()
        tps = self._partitions.get(topic) or self._partitions_of(topic)
        if tps:  # else the metadata is not there yet: aiokafka waits for it (and partitions)
            if partition is None and key is not None:
                partition = self._hashes.partition(key, len(tps))
            # Hot path: straight into aiokafka's accumulator (a private API of the pinned 0.14) when what
            # `AIOKafkaProducer.send` would check is known to hold: the partition exists, there are no
            # headers, the record is not empty and far below the request size, a transaction is open if
            # the producer has them. That send re-reads the metadata twice (a set built each time),
            # estimates the size, logs and adds two coroutine frames: a noticeable share of the
            # passthrough's per-event time (py-spy). Anything else takes aiokafka's own send, with its
            # checks and errors. The accumulator itself adds the partition to the open transaction.
            size = (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
            if (partition is not None and partition < len(tps) and not headers
                    and 0 < size < self._direct_size
                    and (not self._transactional or private.in_transaction(self._client))):
                try:
                    future: asyncio.Future[object] = await self._accumulator.add_message(
                        tps[partition], key, value, self._timeout, timestamp_ms=timestamp_ms)
                except KafkaError as exc:
                    raise DeliveryFailed(f"cannot send to {topic!r}: {exc}") from exc
                self._deliveries.add(future)
                return future
        try:
            future = await self._client.send(
                topic, value, key=key, partition=partition,
                headers=list(headers) if headers else None, timestamp_ms=timestamp_ms,  # (a list only)
            )
        except KafkaError as exc:
            raise DeliveryFailed(f"cannot send to {topic!r}: {exc}") from exc
        except IllegalOperation as exc:  # only transactional producers: no transaction open
            raise TransactionAborted(f"cannot send to {topic!r}: the transaction was aborted ({exc})"
                                     ) from exc
        self._deliveries.add(future)
        return future

    async def send_many(self, topic: str, records: Sequence[KeyedRecord]) -> None:
        """(Each partition's records appended to batches of engine's, as `send_batch` does: a record costs
        a `BatchBuilder.append`, not aiokafka's `add_message` with its future and callbacks. All of them are
        enqueued, or none: nothing is awaited between the batches (`aiokafka_private.enqueue_batches`), so a
        caller cancelled while this waits (for the topic's metadata, a transaction, room in the accumulator)
        has enqueued nothing, and may send the run again without sending any of it twice. Keyless records
        go to one partition picked at random for the run, as Kafka's sticky partitioner keeps a batch's.)"""
        tps = self._partitions.get(topic) or self._partitions_of(topic)
        if not tps:  # (aiokafka's wait for the topic's metadata; DeliveryFailed past the request timeout)
            try:
                await self._client.partitions_for(topic)
            except KafkaError as exc:
                raise DeliveryFailed(f"cannot send to {topic!r}: {exc!r}") from exc
            tps = self._partitions_of(topic)
            if not tps:
                raise DeliveryFailed(f"cannot send to {topic!r}: the broker lists no partitions of it")
        # Every record appended first, its size checked (a batch builder takes any record as its first):
        # a record too large is refused with nothing of the run enqueued.
        limit = self._direct_size + DIRECT_MARGIN
        batches: dict[int, list[Any]] = {}  # each partition's batches, the last one open
        partition_of, count = self._hashes.partition, len(tps)
        keyless = random.randrange(count)
        for index, (key, value, headers, timestamp_ms) in enumerate(records):
            if type(headers) is not list:  # (the batch builder, in C, takes a list only)
                headers = list(headers)
            size = len(key or b"") + len(value or b"") + sum(len(k) + len(v or b"") for k, v in headers)
            if size > limit:
                raise RecordTooLarge(f"a record for {topic!r} of {size} bytes is larger than the producer's "
                                     f"max_request_size ({limit} bytes)", index)
            partition = partition_of(key, count) if key is not None else keyless
            filling = batches.get(partition)
            if filling is None:
                filling = batches[partition] = [self._client.create_batch()]
            if filling[-1].append(key=key, value=value, timestamp=timestamp_ms, headers=headers) is None:
                filling.append(self._client.create_batch())  # full: go on in a new one
                filling[-1].append(key=key, value=value, timestamp=timestamp_ms, headers=headers)
        targets = [tps[partition] for partition in batches]
        deadline = time.monotonic() + self._timeout
        while True:  # room in every target partition (aiokafka's backpressure), then an open transaction
            if not self._open.is_set():
                await self._open.wait()
                continue
            waiting = private.waiting_batch(self._accumulator, targets)
            if waiting is None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeliveryFailed(f"cannot send to {topic!r}: no room in {self._timeout:.0f} s")
            try:
                await waiting.wait_drain(left)
            except KafkaError as exc:
                raise DeliveryFailed(f"cannot send to {topic!r}: {exc!r}") from exc
        if self._transactional and not private.in_transaction(self._client):
            raise TransactionAborted(f"cannot send to {topic!r}: the transaction was aborted")
        try:
            sent = private.enqueue_batches(self._accumulator, [
                (batch, tps[partition]) for partition, filled in batches.items() for batch in filled])
        except KafkaError as exc:
            raise DeliveryFailed(f"cannot send to {topic!r}: {exc!r}") from exc
        for future in sent:
            self._deliveries.add(future)

    async def send_batch(self, topic: str, partition: int,
                         records: Sequence[tuple[bytes | None, bytes | None]],
                         timestamps: Sequence[int] | None = None) -> asyncio.Future[int]:
        if not self._open.is_set():
            await self._open.wait()
        batch, relative = self._client.create_batch(), -1
        for index, (key, value) in enumerate(records):
            at = None if timestamps is None else timestamps[index]  # None: aiokafka stamps it now
            appended = batch.append(key=key, value=value, timestamp=at)
            if appended is None:  # full: send it and go on in a new one
                await self._send_batch(batch, topic, partition)
                batch = self._client.create_batch()
                appended = batch.append(key=key, value=value, timestamp=at)
                if appended is None:
                    raise DeliveryFailed(f"a record for {topic!r} of {len(value or b'')} bytes does not fit "
                                         "in a batch (max_batch_size)")
            relative = appended.offset  # within the batch
        sent = await self._send_batch(batch, topic, partition)
        last: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        sent.add_done_callback(functools.partial(_last_offset, last, relative))
        # A failure of the batch is reported by the flush or commit that checks `sent`; a checkpoint that
        # failed drops `last` unread, which asyncio would log as an error of its own.
        last.add_done_callback(lambda done: first_failure([done]))  # type: ignore[list-item]
        return last

    async def _send_batch(self, batch: Any, topic: str, partition: int) -> asyncio.Future[Any]:
        try:
            sent: asyncio.Future[Any] = await self._client.send_batch(batch, topic, partition=partition)
        except KafkaError as exc:
            raise DeliveryFailed(f"cannot send to {topic!r}: {exc}") from exc
        except IllegalOperation as exc:
            raise TransactionAborted(f"cannot send to {topic!r}: the transaction was aborted ({exc})"
                                     ) from exc
        self._deliveries.add(sent)
        return sent

    def _partitions_of(self, topic: str) -> list[TopicPartition]:
        """The topic's partitions by number, from the client's metadata; empty while it has none."""
        known = self._client.client.cluster.partitions_for_topic(topic)
        if not known:
            return []
        tps = self._partitions[topic] = [TopicPartition(topic, number) for number in range(len(known))]
        return tps

    def _metadata_changed(self, _cluster: object) -> None:
        self._partitions.clear()

    async def flush(self) -> None:
        sent, failure = self._deliveries.take()
        await self._client.flush()
        pending = [future for future in sent if not future.done()]
        if pending:
            await asyncio.wait(pending)
        failure = failure or first_failure(sent)
        if isinstance(failure, KafkaProducerFenced):
            raise ProducerFenced(f"transaction fenced: a newer producer took over this id ({failure})")
        if failure is not None:
            raise DeliveryFailed(f"the broker did not acknowledge a record: {failure}")


def _last_offset(last: asyncio.Future[int], relative: int, batch: asyncio.Future[Any]) -> None:
    """A batch was acknowledged (or failed): its last record's offset is its base offset plus `relative`."""
    if last.done():
        return
    if batch.cancelled():
        last.cancel()
    elif (failure := batch.exception()) is not None:
        last.set_exception(failure)
    else:
        last.set_result(batch.result().offset + relative)
