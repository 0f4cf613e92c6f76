"""The Kafka transport's consumer: one aiokafka consumer of the group (classic or streams protocol),
its fetches a batch at a time, its pauses, seeks and commits, and the group's callbacks handed to the
worker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    IllegalStateError,
    IncompatibleBrokerVersion,
    InconsistentGroupProtocolError,
    KafkaConnectionError,
    KafkaError,
)
from aiokafka.errors import OffsetOutOfRangeError as KafkaOffsetOutOfRange

from engine.assignor import (
    Placement,
)
from engine.errors import (
    MembershipLost,
    NotAStreamsGroup,
    OffsetOutOfRange,
    TopologyError,
    TransportError,
)
from engine.events import TP, RawRecord
from engine.transport import aiokafka_private as private
from engine.transport.aiokafka_private_fetch import read_batches
from engine.transport.base import ClientTuning
from engine.transport.kafka_classic_group import EngineAssignor, GroupListener
from engine.transport.kafka_connect import (
    NOT_AUTHORIZED,
    not_authorized,
    start_client,
    stop_quietly,
    unavailable,
)
from engine.transport.kafka_errors import read_failed
from engine.transport.kafka_streams_errors import unsupported
from engine.transport.kafka_streams_member import StreamsMember
from engine.transport.kafka_streams_tasks import check_topology

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping
    from contextlib import AbstractContextManager

    from engine.transport.base import GroupTopology

log = logging.getLogger(__name__)


IDLE_POLL = 0.5  # seconds a fetch that may wait for as long as nothing changes waits here before returning


POSITION_WAIT = 0.05  # seconds `lag` waits for a partition's position before saying it is not known


# How long a consumer's stop may take. Its stop leaves the group, which asks the group's coordinator, and
# aiokafka waits for an answer without a bound (a coordinator that restarted may take minutes). Leaving only
# spares the group the session timeout: past this, the worker stops without it, so that SIGTERM stops it.
CONSUMER_STOP_TIMEOUT = 10.0


CONFIRM_TIMEOUT = 5.0  # seconds a membership check may take before the checkpoint gives up on it


REBALANCE_TIMEOUT_MS = 30_000  # how long the group waits for members to rejoin (revoke callbacks included)


class KafkaConsumer:
    def __init__(
        self,
        servers: str,
        options: Mapping[str, Any],
        group_id: str | None,
        listener: GroupListener,
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
            partition_assignment_strategy=(EngineAssignor(placement or Placement()),),
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
        self._fetch_batches = tuning.fetch_batches
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
            await start_client(self._client, self._servers, self._options)
            if self._fetch_batches:
                read_batches(self._client)
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
            await stop_quietly(self._client, "consumer", within=CONSUMER_STOP_TIMEOUT)
            self._client = self._aiokafka_consumer(self._classic_group)
            if self._topics:
                self._client.subscribe(topics=sorted(self._topics), listener=self._listener)
        try:
            await start_client(self._client, self._servers, self._options)
        except InconsistentGroupProtocolError as exc:
            await stop_quietly(self._client, "consumer", within=CONSUMER_STOP_TIMEOUT)
            raise TransportError(
                f"group {self._group_id!r} is a streams group (KIP-1071) whose members are running, which a "
                "member of the classic protocol cannot join: stop them all first (committed offsets stay "
                "with the group), or run this worker with group_protocol=streams or auto") from exc
        if self._fetch_batches:
            read_batches(self._client)
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
            raise not_authorized(self._servers, self._options, named) from exc
        except tuple(NOT_AUTHORIZED) as exc:
            raise not_authorized(self._servers, self._options, exc) from exc
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
        await stop_quietly(self._client, "consumer", within=CONSUMER_STOP_TIMEOUT)

    @property
    def group_protocol(self) -> str | None:
        return self._protocol

    def group_generation(self) -> int | None:
        if self._member is not None:
            return self._member.epoch if self._member.epoch > 0 else None
        return private.group_generation(private.group_coordinator(self._client))

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
            raise await unavailable(self._servers, self._options, exc) from exc
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
