"""kafka://host:port[,host:port]: the transport on Apache Kafka through aiokafka.

aiokafka lives here and only here; its errors are translated into engine's at this edge. Consumer records
and topic partitions pass through unconverted: the records of aiokafka's batch parser satisfy RawRecord
(`aiokafka_private.bare_records`: no ConsumerRecord made of each) and its TopicPartition is a (topic,
partition) tuple equal to our TP, so the hot path copies nothing.
The security settings (security_protocol, sasl_*, ssl_* files) become aiokafka's options (`client_options`),
and `broker_options` (any of aiokafka's client options) are passed to every aiokafka client as they are.

No client of engine's lets the broker auto-create a topic: aiokafka asks for it in every metadata request
(`allow_auto_topic_creation`, true unless told), and a topic the broker creates gets the broker's partition
count and no config (a repartition topic with 1 partition, a changelog that is not compacted). The worker
creates every topic of its topology itself; each engine client's metadata requests say no
(`aiokafka_private.refuse_auto_create`), while other aiokafka clients in the process keep aiokafka's ways.

Every use of aiokafka's private parts goes through engine.transport.aiokafka_private.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import ssl
import time
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.client import CoordinationType
from aiokafka.conn import create_conn
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocol,
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    IllegalOperation,
    IllegalStateError,
    IncompatibleBrokerVersion,
    InconsistentGroupProtocolError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
    UnsupportedSaslMechanismError,
)
from aiokafka.errors import OffsetOutOfRangeError as KafkaOffsetOutOfRange
from aiokafka.errors import ProducerFenced as KafkaProducerFenced
from aiokafka.helpers import create_ssl_context

from engine.assignor import (
    VERSION,
    Placement,
    decode_assignment,
    decode_member,
    encode_assignment,
    encode_member,
)
from engine.errors import (
    BrokerRefused,
    BrokerUnavailable,
    DeliveryFailed,
    MembershipLost,
    NotAStreamsGroup,
    OffsetOutOfRange,
    ProducerFenced,
    RecordTooLarge,
    TopologyError,
    TransactionAborted,
    TransportError,
)
from engine.events import TP, Headers, RawRecord
from engine.partitioner import KeyHashes
from engine.transport import aiokafka_private as private
from engine.transport.deliveries import Deliveries, first_failure
from engine.transport.kafka_errors import read_failed, retriable
from engine.transport.kafka_protocol import BROKER_DEFAULT, CreateTopicsRequest, TopicIdsRequest, topic_ids
from engine.transport.kafka_streams_describe import StreamsGroupDescribeRequest, described_groups
from engine.transport.kafka_streams_member import (
    GROUP_ID_NOT_FOUND,
    StreamsMember,
    check_topology,
    streams_group_description,
    unsupported,
)
from engine.transport.kafka_txn_offsets import send_offsets_as_member

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence
    from contextlib import AbstractContextManager

    from engine.transport.base import GroupTopology, KeyedRecord, PartitionsCallback, TopicSpec
from engine.transport.base import ClientTuning, GroupDescription, GroupMember

IDLE_POLL = 0.5  # seconds a fetch that may wait for as long as nothing changes waits here before returning
POSITION_WAIT = 0.05  # seconds `lag` waits for a partition's position before saying it is not known
log = logging.getLogger(__name__)



TOPIC_ALREADY_EXISTS = 36
CREATE_TIMEOUT_MS = 30_000


# How long a consumer's stop may take. Its stop leaves the group, which asks the group's coordinator, and
# aiokafka waits for an answer without a bound (a coordinator that restarted may take minutes). Leaving only
# spares the group the session timeout: past this, the worker stops without it, so that SIGTERM stops it.
CONSUMER_STOP_TIMEOUT = 10.0


GROUP_NOT_LEFT = "without leaving the group: its partitions move after the session timeout"


async def _stop_quietly(client: Any, what: str, within: float | None = None,
                        left: str = GROUP_NOT_LEFT) -> None:
    """Stop an aiokafka client, in at most `within` seconds if given (then said at WARNING, with what was
    `left` undone). aiokafka's stop awaits its own cancelled fetch tasks and can let their CancelledError out
    (seen with a broker down); that must not look like *our* task being cancelled."""
    try:
        async with asyncio.timeout(within):
            await client.stop()
    except TimeoutError:
        log.warning("the %s did not stop within %.0f s (the broker it needs unreachable?); stopped %s",
                    what, within, left)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # we really are being cancelled
        log.warning("aiokafka %s raised CancelledError while stopping; ignored", what)


# What the broker's authorizer refuses, by aiokafka's error: the kind of resource an ACL is missing on, and
# what an engine worker needs granted on it.
_NOT_AUTHORIZED = {
    GroupAuthorizationFailedError: ("the consumer group", "Read on the group (named by the app id)"),
    TopicAuthorizationFailedError: ("a topic", "Describe and Read on a topic the app reads, and Create on "
                                    "one it makes (or create it first)"),
    TransactionalIdAuthorizationFailed: ("a transactional id", "Write and Describe on the transactional ids "
                                         "prefixed with the app id (one per task, one per worker)"),
    ClusterAuthorizationFailedError: ("the cluster", "IdempotentWrite on the cluster"),
}


async def _start(client: Any, servers: str, options: Mapping[str, Any], stop: str = "stop") -> None:
    """Start an aiokafka client (stopped again by its method `stop` if that fails); no broker is a
    BrokerUnavailable that says what to do, a broker that refuses this client a BrokerRefused that says
    what."""
    try:
        await client.start()
    except KafkaConnectionError as exc:
        await getattr(client, stop)()
        raise await _unavailable(servers, options, exc) from exc
    except tuple(_NOT_AUTHORIZED) as exc:
        await getattr(client, stop)()
        raise _not_authorized(servers, options, exc) from exc
    except KafkaError as exc:  # (a broker that went away mid-start: a task's set-up waits that out)
        if not retriable(exc):
            raise
        await getattr(client, stop)()
        raise read_failed(f"cannot start a Kafka client of {servers!r}", exc) from exc


def _not_authorized(servers: str, options: Mapping[str, Any], exc: BaseException, *,
                    what: str | None = None) -> BrokerRefused:
    """`what`: the resource refused, where the error alone does not say which."""
    kind, needs = next(found for error, found in _NOT_AUTHORIZED.items() if isinstance(exc, error))
    what = what or kind
    user = options.get("sasl_plain_username") or "this client"
    return BrokerRefused(f"the Kafka broker at {servers!r} did not authorize {user!r} for {what} "
                         f"({type(exc).__name__}: {exc}); grant it {needs}")


# The options of a connection's security, as aiokafka's create_conn takes them.
_CONNECTION_OPTIONS = ("security_protocol", "ssl_context", "sasl_mechanism", "sasl_plain_username",
                       "sasl_plain_password")


async def _unavailable(servers: str, options: Mapping[str, Any], exc: BaseException) -> BrokerUnavailable:
    """Why no client could bootstrap: aiokafka says only "Unable to bootstrap" (the cause is in its log),
    so one connection is tried again to tell a broker that refuses these credentials or this TLS from one
    that is not there. The message never holds the password."""
    host, _, port = servers.split(",")[0].rpartition(":")
    try:
        conn = await create_conn(host, int(port), request_timeout_ms=10_000,
                                 **{k: v for k, v in options.items() if k in _CONNECTION_OPTIONS})
    except (SaslAuthenticationFailed, UnsupportedSaslMechanismError) as refused:
        user = options.get("sasl_plain_username")
        return BrokerRefused(
            f"the Kafka broker at {servers!r} refused user {user!r} ({type(refused).__name__}: "
            f"{refused}); check sasl_username, sasl_password and sasl_mechanism "
            f"({options.get('sasl_mechanism')!r}), ENGINE_SASL_* or the CLI's options")
    except ssl.SSLError as refused:
        return BrokerRefused(
            f"TLS with the Kafka broker at {servers!r} failed ({refused}); check ssl_cafile (the CA that "
            "signed the broker's certificate) and ssl_certfile/ssl_keyfile")
    except Exception:  # still nothing there: the original error says it
        pass
    else:
        conn.close()
    return BrokerUnavailable(f"no Kafka broker answered at {servers!r} ({exc}); is Kafka running?")


ADMIN_RETRY = 20.0  # seconds a retriable admin failure (a broker restarting) is retried
CONFIRM_TIMEOUT = 5.0  # seconds a membership check may take before the checkpoint gives up on it
TRANSACTIONAL_LINGER = 0.005  # seconds; see KafkaTransport.producer
REBALANCE_TIMEOUT_MS = 30_000  # how long the group waits for members to rejoin (revoke callbacks included)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka's base is untyped
    """aiokafka has no on_partitions_lost: it calls on_partitions_revoked before every re-join, also when the
    coordinator no longer knew this member. In that case it has already reset the member's generation
    (reset_generation) when the callback runs: that is how lost is told apart from revoked."""

    def __init__(self, on_assigned: PartitionsCallback | None, on_revoked: PartitionsCallback | None,
                 on_lost: PartitionsCallback | None):
        self.assigned = on_assigned
        self.revoked = on_revoked
        self.lost = on_lost
        self.consumer: AIOKafkaConsumer | None = None

    async def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        if not revoked:
            return
        tps = {TP(tp.topic, tp.partition) for tp in revoked}
        if self.lost is not None and private.session_expired(private.group_coordinator(self.consumer)):
            await self.lost(tps)
        elif self.revoked is not None:
            await self.revoked(tps)

    async def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        if self.assigned is not None:
            await self.assigned({TP(tp.topic, tp.partition) for tp in assigned})


class _EngineAssignor(AbstractPartitionAssignor):  # type: ignore[misc]  # aiokafka's base is untyped
    """engine.assignor through aiokafka's assignor interface. aiokafka declares the methods as class
    methods; an instance serves as well (it calls them on the objects it is given) and carries the worker's
    Placement. Tasks are partition numbers: the task count is the largest partition count subscribed."""

    name = "engine"

    def __init__(self, placement: Placement) -> None:
        self.placement = placement

    def metadata(self, topics: Collection[str]) -> ConsumerProtocolMemberMetadata:
        user_data = encode_member(self.placement.member(""))
        return ConsumerProtocolMemberMetadata(VERSION, sorted(topics), user_data)

    def assign(self, cluster: Any, members: Mapping[str, Any]) -> dict[str, ConsumerProtocolMemberAssignment]:
        counts: dict[str, int] = {}
        for metadata in members.values():
            for topic in metadata.subscription:
                partitions = cluster.partitions_for_topic(topic)
                if partitions:
                    counts[topic] = len(partitions)
        placed = self.placement.assign(
            [decode_member(member_id, metadata.user_data) for member_id, metadata in members.items()],
            max(counts.values(), default=0))
        out = {}
        for member_id, metadata in members.items():
            share = placed[member_id]
            topics = [(topic, sorted(p for p in share.active if p < counts[topic]))
                      for topic in sorted(metadata.subscription) if topic in counts]
            out[member_id] = ConsumerProtocolMemberAssignment(VERSION, topics, encode_assignment(share))
        return out

    def on_assignment(self, assignment: Any) -> None:
        active = frozenset(p for _, partitions in assignment.assignment for p in partitions)
        self.placement.assignment_received(decode_assignment(active, assignment.user_data))


class KafkaConsumer:
    def __init__(
        self,
        servers: str,
        options: Mapping[str, Any],
        group_id: str | None,
        listener: _Listener,
        max_poll_records: int,
        auto_offset_reset: str = "earliest",
        placement: Placement | None = None,
        instance_id: str | None = None,
        tuning: ClientTuning | None = None,
        group_protocol: str = "classic",
        group_topology: Callable[[], GroupTopology] | None = None,
        members: dict[str, StreamsMember] | None = None,
    ) -> None:
        """`tuning`: its session timeout and poll interval (the transport's); `group_protocol` and
        `group_topology`: see engine.transport.base.Transport.consumer; `members`: where its streams
        group's membership is registered while it lasts (the transport's, for its producers)."""
        tuning = tuning or ClientTuning()
        self._servers = servers
        self._options = options
        self._listener = listener
        # What every aiokafka consumer of this one is built with: a classic group's member, or (a streams
        # group's member, outside aiokafka's group coordination) one with no group at all.
        self._settings: dict[str, Any] = dict(
            bootstrap_servers=servers,
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            max_poll_records=max_poll_records,
            # Records of aborted transactions (a worker that died mid-checkpoint) are never seen, and
            # open ones only once committed; without transactions this reads like read_uncommitted.
            isolation_level="read_committed",
            **options,
        )
        self._wanted = group_protocol if group_id is not None else "classic"
        self._classic_group: dict[str, Any] = dict(
            group_id=group_id,
            # engine's assignor: partition p of every topic goes with task p (co-partitioned), sticky,
            # with standbys and warm-up (engine.assignor).
            partition_assignment_strategy=(_EngineAssignor(placement or Placement()),),
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            session_timeout_ms=round(tuning.session_timeout * 1000),
            heartbeat_interval_ms=round(tuning.session_timeout * 1000 / 3),
            max_poll_interval_ms=round(tuning.max_poll_interval * 1000),
            group_instance_id=instance_id,
        )
        # A streams group's member assigns its partitions by hand, outside aiokafka's group coordination.
        self._client = self._aiokafka_consumer(
            self._classic_group if self._wanted == "classic" else {"group_id": None})
        self._group_id = group_id
        self._instance_id = instance_id
        self._placement = placement or Placement()
        self._tuning = tuning
        self._members = members if members is not None else {}
        self._group_topology = group_topology
        self._protocol: str | None = None  # chosen at start
        self._member: StreamsMember | None = None  # the streams group's membership, when it is that
        self._topics: set[str] = set()
        self._held: set[TopicPartition] = set()  # held back (hold_back): left out of getmany
        self._paused: set[TopicPartition] = set()  # paused by the caller (pause), kept across reassigns
        self._assigning: set[TopicPartition] = set()  # new in a streams assignment, not set up yet

    def _aiokafka_consumer(self, group: Mapping[str, Any]) -> AIOKafkaConsumer:
        client = AIOKafkaConsumer(**self._settings, **group)
        private.refuse_auto_create(private.consumer_client(client))
        self._listener.consumer = client
        return client

    async def start(self) -> None:
        if self._wanted != "classic":
            await _start(self._client, self._servers, self._options)
            private.bare_records(self._client)
            self._protocol = "streams"  # (the first heartbeat's answer may set tasks up: the ready line)
            try:
                self._member = await self._join_streams_group()
            except Exception:
                self._protocol = None
                await self.stop()
                raise
            if self._member is not None:
                self._members[self._member.group_id] = self._member
                return
            self._protocol = None
            await _stop_quietly(self._client, "consumer", within=CONSUMER_STOP_TIMEOUT)
            self._client = self._aiokafka_consumer(self._classic_group)
            if self._topics:
                self._client.subscribe(topics=sorted(self._topics), listener=self._listener)
        try:
            await _start(self._client, self._servers, self._options)
        except InconsistentGroupProtocolError as exc:
            await _stop_quietly(self._client, "consumer", within=CONSUMER_STOP_TIMEOUT)
            raise TransportError(
                f"group {self._group_id!r} is a streams group (KIP-1071) whose members are running, which a "
                "member of the classic protocol cannot join: stop them all first (committed offsets stay "
                "with the group), or run this worker with group_protocol=streams or auto") from exc
        private.bare_records(self._client)
        if self._group_id is not None:
            self._protocol = "classic"

    async def _join_streams_group(self) -> StreamsMember | None:
        """Join as a member of a streams group; None where `auto` takes the classic protocol (said why)."""
        auto = self._wanted == "auto"
        topology = self._group_topology() if self._group_topology is not None else None
        why = check_topology(topology) if topology is not None else "no topology was given"
        if why is not None:
            if auto:
                log.info("group protocol: classic (%s)", why)
                return None
            raise TopologyError(f"group_protocol=streams cannot run this app: {why}; use classic or auto")
        assert topology is not None
        assert self._group_id is not None
        self._client.assign([])  # the member's partitions are assigned by hand, task by task
        member = StreamsMember(
            client=private.consumer_client(self._client), group_id=self._group_id,
            instance_id=self._instance_id, topology=topology, placement=self._placement, reassign=self,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS, on_assigned=self._listener.assigned,
            on_revoked=self._listener.revoked, on_lost=self._listener.lost,
            session_timeout=(self._tuning or ClientTuning()).session_timeout)
        try:
            await member.join()
        except GroupAuthorizationFailedError as exc:  # (the coordinator's lookup does not name the group)
            named = GroupAuthorizationFailedError(self._group_id)
            raise _not_authorized(self._servers, self._options, named) from exc
        except tuple(_NOT_AUTHORIZED) as exc:
            raise _not_authorized(self._servers, self._options, exc) from exc
        except IncompatibleBrokerVersion as exc:
            if not auto:
                raise unsupported(exc) from exc
            log.info("group protocol: classic (the broker does not offer the streams protocol)")
            return None
        except NotAStreamsGroup as exc:
            if not auto:
                raise
            log.warning("group protocol: classic, not streams: %s", exc)
            return None
        return member

    async def stop(self) -> None:
        if self._member is not None:
            self._members.pop(self._member.group_id, None)
            await self._member.leave()
        await _stop_quietly(self._client, "consumer", within=CONSUMER_STOP_TIMEOUT)

    @property
    def group_protocol(self) -> str | None:
        return self._protocol

    def subscribe(self, topics: Collection[str]) -> None:
        if set(topics) == self._topics:
            return
        added = set(topics) - self._topics
        self._topics = set(topics)
        if self._member is not None:
            self._member.failure = TopologyError(
                f"topics {sorted(added)} were declared after this worker joined its streams group, whose "
                "topology cannot change while it runs: declare every pipeline before the agent's first "
                "await, or run with group_protocol=classic")
        elif self._protocol == "classic" or self._wanted == "classic":
            self._client.subscribe(topics=sorted(self._topics), listener=self._listener)

    # -- a streams group's assignment (engine.transport.kafka_streams_member.Reassign) ------------------

    def reassign(self, tps: set[TP], new: set[TP]) -> None:
        """Read exactly `tps` from now on: those read before go on where they were (aiokafka's `assign`
        forgets positions and pauses: both are put back), the `new` ones paused until `release`."""
        wanted = {TopicPartition(*tp) for tp in tps}
        if wanted == self._client.assignment() and not new:
            return
        positions = private.positions(self._client)
        self._client.assign(sorted(wanted))
        for tp in wanted:
            if tp in positions:
                self._client.seek(tp, positions[tp])
        self._assigning.update(TopicPartition(*tp) for tp in new)
        self._assigning &= wanted
        self._paused &= wanted
        held = (self._paused | self._assigning) & wanted
        if held:
            self._client.pause(*held)

    def release(self, tps: set[TP]) -> None:
        """The tasks of these new partitions are set up (or being set up, paused by the task manager)."""
        done = {TopicPartition(*tp) for tp in tps} & self._assigning
        self._assigning -= done
        ready = (done - self._paused) & self._client.assignment()
        if ready:
            self._client.resume(*ready)

    async def getmany(self, timeout: float | None, max_records: int) -> Mapping[TP, list[RawRecord]]:
        """(Partitions held back are left out of the call: aiokafka keeps their fetched records, and fetches
        no more of them meanwhile.)"""
        if timeout is None:  # (what changes here is not seen: looked at again after a poll interval)
            timeout = IDLE_POLL
        member = self._member
        if member is not None and member.failure is not None:
            raise member.failure
        partitions: list[TopicPartition] = []
        if self._held:
            partitions = [tp for tp in self._client.assignment() if tp not in self._held]
            if not partitions:  # (all held back: asking for none would ask for all)
                with self.waiting_on_worker():
                    await asyncio.sleep(timeout)
                return {}
        try:
            batches: Mapping[TP, list[RawRecord]] = await self._client.getmany(
                *partitions, timeout_ms=int(timeout * 1000), max_records=max_records
            )
        except KafkaConnectionError as exc:
            raise await _unavailable(self._servers, self._options, exc) from exc
        except KafkaOffsetOutOfRange as exc:  # only with auto_offset_reset="none": {TopicPartition: offset}
            asked = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
            raise OffsetOutOfRange({TP(tp.topic, tp.partition): o for tp, o in asked.items()}) from exc
        return batches

    def waiting_on_worker(self) -> AbstractContextManager[None]:
        return private.waiting_as_fetching(self._client)

    def wakeup(self) -> None:
        return None  # (getmany returns after IDLE_POLL at the longest)

    async def commit(self, offsets: Mapping[TP, int]) -> None:
        if self._member is not None:
            await self._member.commit(offsets)
            return
        try:
            await self._client.commit({TopicPartition(*tp): o for tp, o in offsets.items()})
        except KafkaError as exc:
            raise TransportError(f"offset commit failed: {exc}") from exc

    async def confirm_membership(self) -> None:
        """One heartbeat, now: the coordinator answers with this member's standing. aiokafka's heartbeat
        resets the generation when the member is unknown (its session expired), which is what we read.
        A streams group's member beats now."""
        if self._member is not None:
            await self._member.confirm()
            return
        coordinator = private.group_coordinator(self._client)
        if coordinator is None:
            return  # outside a group
        if private.session_expired(coordinator):
            raise MembershipLost("this worker is not a member of its group (its session expired)")
        try:
            async with asyncio.timeout(CONFIRM_TIMEOUT):
                answered = await private.heartbeat(coordinator)
        except (TimeoutError, KafkaError) as exc:
            raise MembershipLost(f"cannot confirm this worker's group membership: {exc!r}") from exc
        if private.session_expired(coordinator):
            raise MembershipLost("the group no longer counts this worker as a member (its session expired)")
        if not answered:
            raise MembershipLost("cannot confirm this worker's group membership: the coordinator did not "
                                 "answer")

    def request_rebalance(self) -> None:
        """(A streams group's broker assigns continuously: a member reports its tasks' positions, or, when
        it let go of tasks it still owns in the group's eyes, joins again.)"""
        if self._member is not None:
            self._member.request_rebalance()
            return
        coordinator = private.group_coordinator(self._client)
        if coordinator is not None:
            private.request_rejoin(coordinator)

    def assignment(self) -> set[TP]:
        return {TP(tp.topic, tp.partition) for tp in self._client.assignment()}

    def assign(self, tps: Collection[TP]) -> None:
        self._client.assign([TopicPartition(*tp) for tp in tps])

    def seek(self, tp: TP, offset: int) -> None:
        self._client.seek(TopicPartition(*tp), offset)

    async def position(self, tp: TP) -> int:
        position: int = await self._client.position(TopicPartition(*tp))
        return position

    async def lag(self, tp: TP) -> int | None:
        """Records known on the broker and not fetched yet; None while that is not known (nothing fetched
        yet, no position yet, or the partition is no longer assigned). Never waits for a position: asked
        while the group moves partitions, aiokafka's `position` waits until one is sought, or fails when the
        partition went away meanwhile."""
        partition = TopicPartition(*tp)
        if partition not in self._client.assignment():
            return None
        end: int | None = self._client.last_stable_offset(partition)  # read_committed: none past it fetched
        if end is None:
            return None
        try:
            async with asyncio.timeout(POSITION_WAIT):
                position: int = await self._client.position(partition)
        except (TimeoutError, IllegalStateError):
            return None
        return max(end - position, 0)

    def fetched_at(self, tp: TP) -> float | None:
        partition = TopicPartition(*tp)
        if partition not in self._client.assignment():
            return None
        stamp: int | None = self._client.last_poll_timestamp(partition)
        return None if stamp is None else stamp / 1000

    async def offsets(self, tps: Collection[TP]) -> dict[TP, tuple[int, int]]:
        partitions = [TopicPartition(*tp) for tp in tps]
        if not partitions:
            return {}
        try:
            first = await self._client.beginning_offsets(partitions)
            end = await self._client.end_offsets(partitions)
        except KafkaError as exc:
            raise read_failed(f"cannot read offsets of {sorted(tps)}", exc, self._unknown(tps)) from exc
        return {TP(tp.topic, tp.partition): (first[tp], end[tp]) for tp in partitions}

    def _unknown(self, tps: Collection[TP]) -> list[TP]:
        """The partitions of `tps` the client's metadata does not have."""
        return [tp for tp in tps if tp.partition not in (self._client.partitions_for_topic(tp.topic) or ())]

    async def offsets_at(self, tps: Collection[TP], timestamp_ms: int) -> dict[TP, int]:
        partitions = [TopicPartition(*tp) for tp in tps]
        if not partitions:
            return {}
        try:
            found = await self._client.offsets_for_times({tp: timestamp_ms for tp in partitions})
            end = await self._client.end_offsets(partitions)
        except KafkaError as exc:
            raise read_failed(f"cannot find offsets at {timestamp_ms} ms of {sorted(tps)}", exc,
                              self._unknown(tps)) from exc
        return {TP(tp.topic, tp.partition): (found[tp].offset if found.get(tp) is not None else end[tp])
                for tp in partitions}

    async def committed(self, tps: Collection[TP]) -> dict[TP, int | None]:
        """(Not aiokafka's `committed`, which reads a coordinator that cannot answer yet as "nothing
        committed": engine.transport.aiokafka_private.committed_offsets; a streams group's member asks
        its coordinator the same way.)"""
        if self._member is not None:
            return await self._member.committed(tps)
        tps = list(tps)
        coordinator = private.group_coordinator(self._client)
        if coordinator is None:
            raise TransportError(f"cannot read committed offsets of {sorted(tps)}: not in a group")
        try:
            found = await private.committed_offsets(coordinator, [TopicPartition(*tp) for tp in tps])
        except KafkaError as exc:
            raise read_failed(f"cannot read committed offsets of {sorted(tps)}", exc) from exc
        return {tp: found.get((tp.topic, tp.partition)) for tp in tps}

    def pause(self, tps: Collection[TP]) -> None:
        paused = {TopicPartition(*tp) for tp in tps}
        self._paused |= paused
        self._client.pause(*(paused & self._client.assignment()))

    def resume(self, tps: Collection[TP]) -> None:
        resumed = {TopicPartition(*tp) for tp in tps}
        self._paused -= resumed
        self._client.resume(*((resumed - self._assigning) & self._client.assignment()))

    def hold_back(self, tps: Collection[TP]) -> None:
        self._held.update(TopicPartition(*tp) for tp in tps)

    def let_through(self, tps: Collection[TP]) -> None:
        self._held.difference_update(TopicPartition(*tp) for tp in tps)


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
        await _start(self._client, self._servers, self._options)
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
        await _stop_quietly(self._client, "producer", within, left="with sends undelivered (their records' "
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


COMMITTED_WAIT = 30.0  # seconds an admin waits for a group's coordinator to answer OffsetFetch


class KafkaAdmin:
    def __init__(self, servers: str, options: Mapping[str, Any]) -> None:
        self._servers = servers
        self._options = dict(options)
        self._client = AIOKafkaAdminClient(bootstrap_servers=servers, **options)
        private.refuse_auto_create(private.network_client(self._client))
        self._started = False

    async def _ensure_started(self) -> None:
        if not self._started:
            await _start(self._client, self._servers, self._options, stop="close")
            self._started = True

    async def create_topics(self, specs: Collection[TopicSpec]) -> dict[str, int]:
        await self._ensure_started()
        existing = await self.describe_topics()
        new = [
            (s.name, s.partitions, BROKER_DEFAULT if s.replication is None else s.replication, dict(s.config))
            for s in specs if s.name not in existing
        ]
        if not new:
            return existing
        try:
            request = CreateTopicsRequest(new, CREATE_TIMEOUT_MS)
            response = await private.send_to_controller(self._client, request)
        except KafkaError as exc:
            raise TransportError(f"cannot create topics {sorted(t[0] for t in new)}: {exc}") from exc
        for topic, code, *rest in response.topic_errors:
            if code == TopicAuthorizationFailedError.errno:  # not visible to this user, nor creatable
                raise _not_authorized(self._servers, self._options, TopicAuthorizationFailedError(topic),
                                      what=f"the topic {topic!r}")
            if code not in (0, TOPIC_ALREADY_EXISTS):
                message = rest[0] if rest else ""
                raise TransportError(f"cannot create topic {topic!r}: error {code} {message}")
        # Created is not yet visible: metadata reaches the brokers asynchronously, each on its own. Return
        # the first description that has every new topic: a later one may come from a broker that has not
        # heard of them yet (a worker once failed to start on a 3-broker cluster that way).
        names = {t[0] for t in new}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not names <= (described := await self.describe_topics()).keys():
            if loop.time() > deadline:
                raise TransportError(f"topics {sorted(names)} were created but are not visible after 30s")
            await asyncio.sleep(0.05)
        return described

    async def describe_topics(self) -> dict[str, int]:
        """Partitions per topic. The admin asks one broker; one that is restarting (not ready, its connection
        refused) is retried a while (ADMIN_RETRY seconds), as a worker starting during a broker's restart
        must not fail for it."""
        await self._ensure_started()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ADMIN_RETRY
        while True:
            try:
                described = await self._client.describe_topics()
                break
            except KafkaError as exc:
                if not exc.retriable or loop.time() > deadline:
                    raise await _unavailable(self._servers, self._options, exc) from exc
                log.info("describing topics failed (%s); retrying", exc)
                await asyncio.sleep(0.2)
        return {t["topic"]: len(t["partitions"]) for t in described if not t.get("error_code")}

    async def describe_group(self, group_id: str) -> GroupDescription:
        """A streams group as StreamsGroupDescribe tells it (its members' tasks, endpoints and changelog
        positions), else a classic group as DescribeGroups tells it (the classic request sees a streams
        group as empty, its members not counted: a reset would go on under them)."""
        await self._ensure_started()
        streams = await self._describe_streams_group(group_id)
        if streams is not None:
            return streams
        try:
            responses = await self._client.describe_consumer_groups([group_id])
        except KafkaError as exc:
            raise TransportError(f"cannot describe group {group_id!r}: {exc}") from exc
        group = responses[0].groups[0]
        error, state, members = group[0], group[2], group[5]
        if error:
            raise TransportError(f"cannot describe group {group_id!r}: error {error}")
        described = []
        for member_id, _client_id, host, metadata, assignment in (m[:5] for m in members):
            joined = ConsumerProtocol.METADATA.decode(metadata) if metadata else None
            given = ConsumerProtocol.ASSIGNMENT.decode(assignment) if assignment else None
            active = frozenset(p for _, ps in (given.assignment if given is not None else []) for p in ps)
            member = decode_member(member_id, joined.user_data if joined is not None else None)
            described.append(GroupMember(
                member_id, host, decode_assignment(active, given.user_data if given is not None else None),
                member.positions))
        return GroupDescription(state, described)

    async def _describe_streams_group(self, group_id: str) -> GroupDescription | None:
        """None where the broker has no streams groups, or `group_id` is not one."""
        client = private.network_client(self._client)
        try:
            coordinator = await client.coordinator_lookup(CoordinationType.GROUP, group_id)
            response = await client.send(coordinator, StreamsGroupDescribeRequest([group_id]))
        except IncompatibleBrokerVersion:
            return None
        except KafkaError as exc:
            raise TransportError(f"cannot describe group {group_id!r}: {exc}") from exc
        (group,) = described_groups(response)
        if group.error_code == GROUP_ID_NOT_FOUND:
            return None
        if group.error_code:
            raise TransportError(f"cannot describe group {group_id!r}: error {group.error_code} "
                                 f"({group.error_message})")
        return streams_group_description(group)

    async def committed(self, group_id: str) -> dict[TP, int]:
        """Every offset the group committed, once its coordinator can answer (one loading the group's offsets
        after a broker restarted is asked again, up to COMMITTED_WAIT: not read as "nothing committed")."""
        await self._ensure_started()
        try:
            async with asyncio.timeout(COMMITTED_WAIT):
                coordinator = private.AdminCoordinator(self._client, group_id)
                offsets = await private.committed_offsets(coordinator, None)
        except KafkaError as exc:
            raise TransportError(f"cannot read the offsets of group {group_id!r}: {exc!r}") from exc
        except TimeoutError as exc:
            raise TransportError(f"cannot read the offsets of group {group_id!r}: its coordinator did not "
                                 f"answer within {COMMITTED_WAIT:.0f} s") from exc
        return {TP(topic, partition): offset for (topic, partition), offset in offsets.items()}

    async def topic_configs(self, names: Collection[str]) -> dict[str, dict[str, str]]:
        await self._ensure_started()
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        try:
            responses = await self._client.describe_configs(resources)
        except KafkaError as exc:
            raise TransportError(f"cannot read the configs of topics {sorted(names)}: {exc}") from exc
        configs: dict[str, dict[str, str]] = {}
        for response in responses:
            for code, _message, _type, name, entries in response.resources:
                if code == 0:
                    configs[name] = {entry[0]: entry[1] for entry in entries}
        return configs

    async def topic_ids(self, names: Collection[str]) -> dict[str, bytes]:
        await self._ensure_started()
        client = private.network_client(self._client)  # sends a request of our own
        try:
            response = await client.send(client.get_random_node(), TopicIdsRequest(sorted(names)))
        except KafkaError as exc:
            log.warning("cannot read topic ids (%s); changelog identities are not checked", exc)
            return {}
        return topic_ids(response)

    async def delete_topics(self, names: Collection[str]) -> None:
        await self._ensure_started()
        try:
            await self._client.delete_topics(sorted(names))
        except KafkaError as exc:
            raise TransportError(f"cannot delete topics {sorted(names)}: {exc}") from exc
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while set(names) & (await self.describe_topics()).keys():
            if loop.time() > deadline:
                raise TransportError(f"topics {sorted(names)} were deleted but are still listed after 30s")
            await asyncio.sleep(0.1)

    async def set_committed(self, group_id: str, offsets: Mapping[TP, int]) -> None:
        """Through a consumer of the group outside any generation: the broker takes such a commit while the
        group has no members (aiokafka's admin has no AlterConsumerGroupOffsets)."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self._servers, group_id=group_id,
                                    enable_auto_commit=False, **self._options)
        private.refuse_auto_create(private.consumer_client(consumer))
        await _start(consumer, self._servers, self._options)
        try:
            consumer.assign([TopicPartition(*tp) for tp in offsets])
            await consumer.commit({TopicPartition(*tp): offset for tp, offset in offsets.items()})
        except KafkaError as exc:
            raise TransportError(f"cannot commit offsets of group {group_id!r}: {exc}") from exc
        finally:
            await _stop_quietly(consumer, "consumer")

    async def delete_records(self, before: Mapping[TP, int]) -> None:
        await self._ensure_started()
        try:
            await self._client.delete_records(
                {TopicPartition(*tp): RecordsToDelete(before_offset=offset) for tp, offset in before.items()})
        except KafkaError as exc:
            raise TransportError(f"cannot delete records of {len(before)} partitions: {exc}") from exc

    async def close(self) -> None:
        if self._started:
            await self._client.close()
            self._started = False


def client_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """aiokafka's options from engine's (Settings.client_options): SASL credentials under aiokafka's names
    (for PLAIN and SCRAM alike), TLS files as an SSL context; any other option as it is."""
    found = dict(options)
    renamed = {"sasl_username": "sasl_plain_username", "sasl_password": "sasl_plain_password"}
    for ours, theirs in renamed.items():
        if ours in found:
            found[theirs] = found.pop(ours)
    files = {name: found.pop(f"ssl_{name}", None) for name in ("cafile", "certfile", "keyfile")}
    if any(files.values()) or (found.get("security_protocol") in ("SSL", "SASL_SSL")
                               and "ssl_context" not in found):
        found["ssl_context"] = create_ssl_context(**files)
    return found


def client_loggers() -> list[logging.Logger]:
    """aiokafka's loggers: one per module of aiokafka that logs (client.py logs as `aiokafka`), made when the
    module is imported, so every module this transport's clients use has its logger once this module is."""
    return [logger for name, logger in logging.Logger.manager.loggerDict.items()
            if name.partition(".")[0] == "aiokafka" and isinstance(logger, logging.Logger)]


class KafkaTransport:
    def __init__(self, url: str, options: Mapping[str, Any], tuning: ClientTuning | None = None) -> None:
        self.url = url
        self.servers = url.split("://", 1)[1]
        self.options = client_options(options)
        self.tuning = tuning or ClientTuning()
        # The streams groups' members of this transport's consumers, by group id: what its producers'
        # transactions commit offsets as.
        self.members: dict[str, StreamsMember] = {}

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
    ) -> KafkaConsumer:
        listener = _Listener(on_assigned, on_revoked, on_lost)
        return KafkaConsumer(self.servers, self.options, group_id, listener, max_poll_records,
                             auto_offset_reset, placement, instance_id, self.tuning, group_protocol,
                             group_topology, self.members)

    def producer(self, transactional_id: str | None = None) -> KafkaProducer:
        # A transactional producer's records are visible only when its transaction commits: waiting to fill
        # its batches costs no latency, and its bursts (changelogs at checkpoints) take fewer requests.
        linger = self.tuning.linger if transactional_id is None else TRANSACTIONAL_LINGER
        return KafkaProducer(self.servers, self.options, transactional_id, linger,
                             self.tuning.transaction_timeout, self.members)

    def admin(self) -> KafkaAdmin:
        return KafkaAdmin(self.servers, self.options)
