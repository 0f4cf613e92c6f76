"""A worker as a member of a streams group (KIP-1071): the heartbeat loop that keeps its membership, and the
reconciliation that turns the broker's task assignment into engine's callbacks, one change at a time.

Part of the Kafka transport (the consumer in kafka.py chooses this membership or aiokafka's classic one at its
start). The broker's group coordinator computes the assignment; every heartbeat answers with the tasks this
member may own now. A task moving away is revoked here first (only that task stops: its partitions are
checkpointed and closed while every other task goes on), then reported gone in the next heartbeat, and only
then given to its next owner. A task given here is set up while the others go on. The heartbeats go on
throughout: the reconciliation (engine.transport.kafka_streams_reconcile) runs beside the loop, never in it.

engine's topology is one subtopology (engine.transport.kafka_streams_tasks: the protocol's task ("0", p) is
engine's task p); the refusals the broker answers with are engine.transport.kafka_streams_errors'.

Offsets are committed as the member (OffsetCommit v9 with its id and epoch): the broker refuses a commit of a
member it fenced, and takes a revoked task's last commit until its revocation is acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiokafka.client import CoordinationType
from aiokafka.errors import KafkaError
from aiokafka.protocol.commit import OffsetFetchRequest

from engine.errors import MembershipLost, TransportError
from engine.events import TP
from engine.transport import aiokafka_private as private
from engine.transport.kafka_errors import read_failed, retriable
from engine.transport.kafka_group_configs import set_streams_group_configs
from engine.transport.kafka_protocol import MemberOffsetCommitRequest, commit_errors
from engine.transport.kafka_streams_errors import (
    COORDINATOR_MOVED,
    FENCED,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_SERVER_ERROR,
    GroupStatuses,
    commit_refused,
    refused,
)
from engine.transport.kafka_streams_group import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    Endpoint,
    Heartbeat,
    HeartbeatAnswer,
    StreamsGroupHeartbeatRequest,
    TaskOffset,
    heartbeat_answer,
)
from engine.transport.kafka_streams_reconcile import NOTHING, Reassign, Reconciliation, Target
from engine.transport.kafka_streams_tasks import SUBTOPOLOGY, declared_topology, task_map, task_set

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from engine.assignor import Placement
    from engine.transport.base import GroupTopology, PartitionsCallback

log = logging.getLogger(__name__)

LEAVE_TIMEOUT = 5.0  # seconds the leaving heartbeat may take at stop (then the session timeout moves tasks)
CONFIRM_TIMEOUT = 5.0  # seconds a membership check now may take
JOIN_TIMEOUT = 60.0  # seconds the first heartbeat is tried while the group's coordinator is not ready
RETRY = 0.5  # seconds between two tries of a heartbeat the broker could not answer
# Kafka's error codes the member acts on.
class StreamsMember:
    """One worker's membership of its streams group: joins with the topology, beats at the interval the
    broker asks for (at once when it has something to acknowledge), reconciles each new assignment through
    the callbacks, commits offsets as the member, and leaves at stop."""

    def __init__(self, *, client: Any, group_id: str, instance_id: str | None, topology: GroupTopology,
                 placement: Placement, reassign: Reassign, rebalance_timeout_ms: int,
                 on_assigned: PartitionsCallback | None, on_revoked: PartitionsCallback | None,
                 on_lost: PartitionsCallback | None, session_timeout: float) -> None:
        self._client = client
        self.group_id = group_id
        self.instance_id = instance_id
        self.member_id = str(uuid.uuid4())
        self.process_id = self.member_id
        self.epoch = JOIN_EPOCH
        self._declared = declared_topology(topology)
        self._counts = topology.read
        self._placement = placement
        self._reassign = reassign
        self._rebalance_timeout_ms = rebalance_timeout_ms
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._on_lost = on_lost
        self._session_timeout = session_timeout
        self._coordinator: int | None = None
        self._request = asyncio.Lock()  # one request to the coordinator at a time
        self._wake = asyncio.Event()
        self._interval = 1.0  # seconds between heartbeats (the broker's answer sets it)
        self._offset_interval = 60.0  # seconds between two reports of the tasks' changelog positions
        self._offsets_due = 0.0  # monotonic time of the next report
        # What the broker assigns this member, and what it owns of that (reconciled one change at a time).
        self._tasks = Reconciliation(placement=placement, reassign=reassign, partitions=self.partitions,
                                     on_assigned=on_assigned, on_revoked=on_revoked, on_lost=on_lost,
                                     owners=lambda: self._owners, members=self._members,
                                     acknowledge=self._wake.set,
                                     failed=self._fail)
        self._reported: Target | None = None  # what the last heartbeat said this member owns
        self._owners: dict[int, str] = {}  # task -> the endpoint of its active owner
        self._endpoint_epoch = 0  # of the owners last heard (the broker sends them again when it moves)
        self._peers: frozenset[str] = frozenset()  # the other members' endpoints, as last heard
        self._tell_peers = False  # the heartbeat being sent frees tasks or wants some: others to beat at once
        self._telling: set[asyncio.Task[None]] = set()
        self._generation = 0  # of this member's membership: one more at each fence (a target then is stale)
        self._doubted = False  # the last membership check got no answer
        self._sent = self._tasks.owned  # what the heartbeat being sent says this member owns
        self._loop_task: asyncio.Task[None] | None = None
        self._last_answer = time.monotonic()
        self._statuses = GroupStatuses(group_id)  # what the group's answers say of it, said once each
        self.failure: BaseException | None = None  # a fatal answer: raised by the consumer's next fetch
        placement.beat_now = self.beat_soon

    @property
    def generation(self) -> int:
        """This member's membership: one more each time it was fenced and joined again. A transaction begun
        in one generation commits its offsets in that one only (engine.transport.kafka's producer)."""
        return self._generation

    def partitions(self, tasks: Collection[int]) -> set[TP]:
        """The partitions of these tasks: partition p of every topic the group reads that has one."""
        return {TP(topic, p) for p in tasks for topic, count in self._counts.items() if p < count}

    # -- the loop -------------------------------------------------------------------------------------

    async def join(self) -> None:
        """The first heartbeat, answered before the worker goes on: a group that cannot be a streams group
        (a live classic group, a broker without the protocol) is told apart here."""
        await set_streams_group_configs(self._client, self.group_id, self._session_timeout,
                                        self._placement.standby_replicas)
        deadline = time.monotonic() + JOIN_TIMEOUT
        while True:
            try:
                answer = await self._beat(first=True)
            except KafkaError as exc:
                if not retriable(exc) or time.monotonic() > deadline:
                    raise
                self._coordinator = None
            else:
                # (UNKNOWN_SERVER_ERROR: seen from a broker whose coordinator was still starting)
                if answer.error_code not in (*COORDINATOR_MOVED, UNKNOWN_SERVER_ERROR):
                    break
                if time.monotonic() > deadline:
                    raise TransportError(f"the streams group {self.group_id!r} has no coordinator ready "
                                         f"after {JOIN_TIMEOUT:.0f} s: {answer.error_message}")
            await asyncio.sleep(RETRY)
        self._loop_task = asyncio.ensure_future(self._run())
        # What the join's answer assigns is reconciled from here, in a task that runs once the caller goes on:
        # the consumer has taken this member as its membership by then, so the task manager's set-up of the
        # tasks (its committed offsets read through the member) finds it.
        if self._tasks.target is not None and self._tasks.target != self._tasks.owned:
            self._tasks.soon()

    async def _run(self) -> None:
        while self.failure is None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self._beat()
            except (KafkaError, OSError, TimeoutError) as exc:
                self._unanswered(exc)
                await asyncio.sleep(RETRY)
            except Exception as exc:  # a fatal answer: the next fetch raises it
                log.error("%s", exc)
                self.failure = exc
                return

    def _unanswered(self, exc: BaseException) -> None:
        """No answer (the coordinator away or moving): looked for again at the next beat. Past the session
        timeout without one, the broker has surely fenced this member: its tasks are lost now, not when it
        finally answers."""
        self._coordinator = None
        silent = time.monotonic() - self._last_answer
        if silent > self._session_timeout and self.epoch != JOIN_EPOCH:
            log.warning("no answer from the group's coordinator for %.0f s (%r): this worker's tasks are "
                        "given to the others; rejoining", silent, exc)
            self._fenced()

    async def _beat(self, *, leave: int | None = None, first: bool = False) -> HeartbeatAnswer:
        """One heartbeat, its answer acted on before the next request goes out: an answer handled after a
        later request was built would leave that request with an epoch the broker moved past (it fences the
        member for it). Shielded: a caller that stops waiting does not lose the answer. Nor is a failure
        of the beat then left unread: once its caller is gone, asyncio's shield drops its own reading of
        the beat, and would log the failure (a connection closed at stop) as never retrieved; the next
        beat meets whatever it was."""
        beat = asyncio.ensure_future(self._beat_now(leave, first))
        beat.add_done_callback(_read_failure)
        return await asyncio.shield(beat)

    async def _beat_now(self, leave: int | None, first: bool) -> HeartbeatAnswer:
        async with self._request:
            request = self._heartbeat(leave)
            coordinator = await self._find_coordinator()
            response = await self._client.send(coordinator, StreamsGroupHeartbeatRequest(request))
            answer = heartbeat_answer(response)
            if leave is not None:
                return answer
            if answer.error_code in COORDINATOR_MOVED:
                self._coordinator = None
                return answer
            if first and answer.error_code == UNKNOWN_SERVER_ERROR:
                return answer  # (tried again by `join`)
            if answer.error_code == 0:
                self._last_answer = time.monotonic()
                owned = (request.active_tasks, request.standby_tasks, request.warmup_tasks)
                if all(tasks is not None for tasks in owned):
                    self._reported = self._sent
            self._handle(answer, first=first)
            if answer.error_code == 0 and self._tell_peers and self._peers:
                self._tell_peers = False
                task = asyncio.ensure_future(self._ask_peers_to_beat())
                self._telling.add(task)
                task.add_done_callback(self._telling.discard)
            return answer

    async def _find_coordinator(self) -> int:
        if self._coordinator is None:
            self._coordinator = int(await self._client.coordinator_lookup(CoordinationType.GROUP,
                                                                          self.group_id))
        return self._coordinator

    def _heartbeat(self, leave: int | None) -> Heartbeat:
        joining = self.epoch == JOIN_EPOCH
        if leave is not None:
            return Heartbeat(self.group_id, self.member_id, leave, instance_id=self.instance_id)
        owned = NOTHING if joining else self._tasks.owned
        self._sent = owned
        # A join (the others give it tasks once they revoked them) or a revocation acknowledged (a task's
        # next owner may take it): the others hear of it only at their next heartbeat unless asked now.
        if joining or (self._reported is not None and self._reported.active - owned.active):
            self._tell_peers = True
        changed = joining or owned != self._reported
        now = time.monotonic()
        offsets = joining or now >= self._offsets_due
        if offsets:
            self._offsets_due = now + self._offset_interval
        endpoint = self._endpoint() if joining else None
        return Heartbeat(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch,
            endpoint_information_epoch=self._endpoint_epoch, instance_id=self.instance_id,
            rebalance_timeout_ms=self._rebalance_timeout_ms if joining else -1,
            topology=self._declared if joining else None,
            # The three task kinds go together (the broker refuses one without the others).
            active_tasks=task_map(owned.active) if changed else None,
            standby_tasks=task_map(owned.standby) if changed else None,
            warmup_tasks=task_map(owned.warmup) if changed else None,
            process_id=self.process_id if joining else None,
            user_endpoint=endpoint,
            client_tags={} if joining else None,
            task_offsets=self._task_offsets(all_tasks=True) if offsets else None,
            task_end_offsets=self._task_offsets(all_tasks=False) if offsets else None,
        )

    def _endpoint(self) -> Endpoint | None:
        host, _, port = self._placement.endpoint.rpartition(":")
        return Endpoint(host, int(port)) if host and port.isdigit() else None

    def _task_offsets(self, *, all_tasks: bool) -> list[TaskOffset]:
        """The changelog positions of the tasks whose stores are here (summed over tables): what the broker
        ranks standby and warm-up candidates by; the active tasks' (their changelogs' ends) as end offsets."""
        positions = self._placement.positions()
        active = self._tasks.owned.active
        return [TaskOffset(SUBTOPOLOGY, p, offset) for p, offset in sorted(positions.items())
                if all_tasks or p in active]

    def beat_soon(self) -> None:
        """Heartbeat now, not at the interval: another member asked (its change may have moved tasks)."""
        self._wake.set()

    async def _ask_peers_to_beat(self) -> None:
        """Ask every other member to heartbeat now (through their web servers, when the worker has one):
        what they are to revoke, or may now take, is in the answer. Best effort: a member not reached
        hears of it at its next heartbeat anyway. It runs as a task nobody awaits: whatever it fails with is
        said here, not left for asyncio to report as never retrieved."""
        if self._placement.ask_to_beat is None:
            return
        try:
            await self._placement.ask_to_beat(sorted(self._peers))
        except Exception as exc:
            log.warning("could not ask the group's other members to heartbeat now (%r): they hear of the "
                        "change at their next heartbeat", exc)

    def request_rebalance(self) -> None:
        """The broker assigns continuously: what a classic member asks a rebalance for is, here, reporting
        the tasks' changelog positions now (a warm-up caught up: the broker may move its task). After a
        membership check that got no answer, the worker let go of tasks the group may still count as this
        member's (engine.tasks.manager): then it joins again, which settles who owns them."""
        if self._doubted:
            log.info("joining the streams group again: tasks were let go of while membership was in doubt")
            self._fenced()
            return
        self._offsets_due = 0.0
        self._wake.set()

    def _fail(self, exc: BaseException) -> None:
        """A fatal failure (the reconciliation's): the consumer's next fetch raises it."""
        self.failure = exc

    # -- answers --------------------------------------------------------------------------------------

    def _handle(self, answer: HeartbeatAnswer, *, first: bool = False) -> None:
        code = answer.error_code
        if code in COORDINATOR_MOVED:
            return
        if code in FENCED:
            log.warning("the group fenced this worker (%s: %s); its tasks go to others; rejoining",
                        "unknown member" if code == UNKNOWN_MEMBER_ID else "fenced epoch",
                        answer.error_message)
            self._fenced()
            return
        if code != 0:
            raise refused(self.group_id, code, answer.error_message, first=first)
        if answer.member_id and answer.member_id != self.member_id:
            self.member_id = answer.member_id
        self.epoch = answer.member_epoch
        if answer.heartbeat_interval_ms > 0:
            self._interval = answer.heartbeat_interval_ms / 1000
        if answer.task_offset_interval_ms > 0:
            self._offset_interval = answer.task_offset_interval_ms / 1000
        self._statuses.heard(answer.statuses)
        owners_changed = False
        if answer.partitions_by_user_endpoint is not None:
            self._endpoint_epoch = answer.endpoint_information_epoch
            owners = {p: f"{e.endpoint.host}:{e.endpoint.port}" for e in answer.partitions_by_user_endpoint
                      for parts in e.active.values() for p in parts}
            self._peers = frozenset(f"{e.endpoint.host}:{e.endpoint.port}"
                                    for e in answer.partitions_by_user_endpoint) - {self._placement.endpoint}
            owners_changed = owners != self._owners
            self._owners = owners
        if answer.active_tasks is not None:
            self._tasks.target = Target(task_set(answer.active_tasks), task_set(answer.standby_tasks),
                                        task_set(answer.warmup_tasks))
        if self._tasks.pending():
            if not first:  # (the join's answer is reconciled once the join returned: see `join`)
                self._tasks.soon()
        elif owners_changed:
            self._placement.owners_received(self._owners, self._members())

    def _members(self) -> frozenset[str]:
        """Every member's endpoint as last heard (the other members', and this one's)."""
        own = self._placement.endpoint
        return self._peers | {own} if own else self._peers

    def _fenced(self) -> None:
        """The broker gave this member's tasks away: they are lost (closed dirty), and it joins again."""
        self._generation += 1
        self.epoch = JOIN_EPOCH
        self._tasks.target = None
        self._reported = None
        self._tasks.lost_pending = True
        self._offsets_due = 0.0
        self._tasks.soon()
        self._wake.set()

    # -- membership and offsets -----------------------------------------------------------------------

    async def confirm(self) -> None:
        """One heartbeat now: raise MembershipLost unless the broker still counts this member in."""
        if self.epoch == JOIN_EPOCH or self._tasks.lost_pending:
            raise MembershipLost("this worker is not a member of its streams group now (rejoining)")
        try:
            async with asyncio.timeout(CONFIRM_TIMEOUT):
                answer = await self._beat()
        except (KafkaError, OSError, TimeoutError) as exc:
            self._doubted = True
            raise MembershipLost(f"cannot confirm this worker's group membership: {exc!r}") from exc
        self._doubted = False
        if answer.error_code != 0 or self.epoch == JOIN_EPOCH:
            raise MembershipLost(f"the streams group does not count this worker as a member "
                                 f"({answer.error_code}: {answer.error_message})")

    async def commit(self, offsets: Mapping[TP, int]) -> None:
        """Commit `offsets` as this member (its id and epoch): refused once the broker fenced it."""
        if not offsets:
            return
        try:
            async with self._request:
                coordinator = await self._find_coordinator()
                positions = {(tp.topic, tp.partition): o for tp, o in offsets.items()}
                request = MemberOffsetCommitRequest(self.group_id, self.member_id, self.epoch, positions,
                                                    self.instance_id)
                errors = commit_errors(await self._client.send(coordinator, request))
        except KafkaError as exc:
            self._coordinator = None
            raise TransportError(f"offset commit failed: {exc!r}") from exc
        failed = {tp: code for tp, code in errors.items() if code}
        if failed:
            refusal, moved = commit_refused(failed)
            if moved:
                self._coordinator = None
            raise refusal

    async def committed(self, tps: Collection[TP]) -> dict[TP, int | None]:
        """The group's committed offset of each partition (None: none), asked of its coordinator (OffsetFetch
        without member fields, which a streams group answers anyone)."""
        if not tps:
            return {}
        topics: dict[str, list[int]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(tp.partition)
        deadline = time.monotonic() + self._session_timeout
        while True:
            try:
                coordinator = await self._find_coordinator()
                response = await self._client.send(
                    coordinator, OffsetFetchRequest(self.group_id, sorted(topics.items())))
                offsets, errors = private.offset_fetch_answer(response)
                if errors:  # (the coordinator loading the group's offsets, moving: asked again)
                    raise errors[0]()
                break
            except KafkaError as exc:  # (a connection closed, the coordinator moving: tried again)
                self._coordinator = None
                if not retriable(exc) or time.monotonic() > deadline:
                    raise read_failed(f"cannot read committed offsets of {sorted(tps)}", exc) from exc
            await asyncio.sleep(RETRY)
        return {tp: offsets.get((tp.topic, tp.partition)) for tp in tps}

    async def leave(self) -> None:
        """Leave the group: a dynamic member's tasks go to the others at once (asked to heartbeat now), a
        static member's wait for it to come back, until the session timeout."""
        if self._loop_task is not None:
            self._loop_task.cancel()
        self._tasks.cancel()
        if self.epoch == JOIN_EPOCH:
            return
        epoch = LEAVE_STATIC_EPOCH if self.instance_id is not None else LEAVE_EPOCH
        try:
            async with asyncio.timeout(LEAVE_TIMEOUT):
                await self._beat(leave=epoch)
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning("could not leave the streams group (%r): its tasks move after the session timeout",
                        exc)
            return
        if epoch == LEAVE_EPOCH:  # (a static member's tasks wait for it: nothing for the others to take)
            await self._ask_peers_to_beat()


def _read_failure(beat: asyncio.Future[Any]) -> None:
    """Mark what a finished beat failed with as read (a caller still waiting gets it through the shield)."""
    if not beat.cancelled() and beat.exception() is not None:
        log.debug("a heartbeat no one waited for any more failed: %r", beat.exception())
