"""The partition assignor, pure: which worker processes which tasks, which keep standby copies, and where
every task lives. Tested without Kafka; the Kafka transport runs it through aiokafka's assignor interface
and the memory transport calls it directly, so both place partitions the same way.

A task is a partition number: partition p of every topic the group reads is in task p, so a worker gets the
same partition numbers of every topic that feeds the same tables (co-partitioned by construction).

Rules, in order (Kafka Streams' StreamsPartitionAssignor, simplified):
1. Balanced: every member gets `tasks // members` active tasks, or one more.
2. Sticky: a task stays with its previous owner while that owner is within its quota, so a join or a leave
   moves only the tasks that must move (a 4th member joining 3 with 12 tasks takes exactly 3).
3. A task that must move goes first to a member whose store of it is caught up (lag within
   `acceptable_lag`; among those, the one that read furthest: its standby), then to the member with the
   least lag, then to the least loaded. A member's lag on a
   task is how far its stores of the task have read their changelogs behind the member that read furthest
   (each member reports its stores' changelog positions when it joins; no store is position 0, so a small
   table is caught up at once).
4. Warm-up (KIP-441): a task that would move only for balance, to a member whose store is further behind
   than `acceptable_lag`, stays with its current owner; the new member follows it as a warm-up standby, and
   moves it once caught up (at the next rebalance, which that member asks for: `Assignment.warming`).
5. Standbys: exactly `standby_replicas` per task (at most members - 1), never on the active owner, on the
   member with the fewest standbys so far, then spread so that one member's tasks have their standbys on as
   many other members as possible (when it leaves, each survivor takes over a share it already holds, and
   balance does not force a task elsewhere), then on the member whose store read furthest.
Every choice breaks ties by member id, so the same input always gives the same output.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

VERSION = 1


@dataclass(frozen=True)
class Member:
    """What a member tells the group when it joins (its subscription's user data)."""

    id: str
    endpoint: str = ""  # host:port where it answers table queries ("" if it serves none)
    owned: frozenset[int] = frozenset()  # tasks it processed before this rebalance
    # task -> how far its stores of the task have read their changelogs (records, summed over the tables)
    positions: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Assignment:
    """One member's share, and the whole group's placement (task -> active owner's endpoint)."""

    active: frozenset[int]
    standby: frozenset[int]
    owners: Mapping[int, str]
    warming: frozenset[int] = frozenset()  # standbys that are to become active once caught up
    # Every member's endpoint the group names, those with only standbys or no task included: who the app's
    # page asks (engine.web).
    members: frozenset[str] = frozenset()


@dataclass
class Placement:
    """A worker's side of the assignor: what it tells the group when it joins, and where it hears its share.
    Given to a transport's consumer, which tells it each assignment it hears (`assignment_received`)."""

    standby_replicas: int = 0
    acceptable_lag: int = 10_000
    stateful: bool = False
    endpoint: str = ""
    positions: Callable[[], Mapping[int, int]] = dict  # task -> its stores' changelog positions
    on_assignment: Callable[[Assignment], None] = lambda assignment: None
    current: Assignment | None = None  # the last assignment heard
    # A streams group's member hears of a change only in the answer to its next heartbeat, seconds apart:
    # a member whose change frees tasks or wants some asks the others to beat at once (`ask_to_beat`: the
    # web server's, given their endpoints; None without one), and beats at once when asked (`beat_now`: its
    # membership's, once it joined).
    ask_to_beat: Callable[[Collection[str]], Awaitable[None]] | None = None
    beat_now: Callable[[], None] = lambda: None

    @property
    def owned(self) -> frozenset[int]:
        """The tasks this worker processed before this rebalance (what stickiness keeps)."""
        return self.current.active if self.current is not None else frozenset()

    def member(self, member_id: str) -> Member:
        return Member(member_id, self.endpoint, self.owned, dict(self.positions()))

    def assign(self, members: Sequence[Member], tasks: int) -> dict[str, Assignment]:
        return assign(members, tasks, standby_replicas=self.standby_replicas,
                      acceptable_lag=self.acceptable_lag, stateful=self.stateful)

    def assignment_received(self, assignment: Assignment) -> None:
        self.current = assignment
        self.on_assignment(assignment)

    def owners_received(self, owners: Mapping[int, str], members: frozenset[str]) -> None:
        """Where the group's tasks are active now, and every member's endpoint, heard without a new
        assignment for this worker (a streams group's broker says so when another member's tasks or endpoint
        change): what queries route by."""
        if self.current is not None:
            self.current = replace(self.current, owners=dict(owners), members=members)

    def workers(self) -> frozenset[str]:
        """Every worker's endpoint the last assignment names: its members, and its tasks' owners."""
        current = self.current
        return frozenset() if current is None else current.members | frozenset(current.owners.values())


def assign(members: Sequence[Member], tasks: int, *, standby_replicas: int = 0,
           acceptable_lag: int = 10_000, stateful: bool = True) -> dict[str, Assignment]:
    """Place `tasks` tasks (0..tasks-1) on `members` (see the module docstring). Without state (`stateful`
    false: the app has no tables) a task moves freely: nothing needs warming up, and no standbys."""
    if not stateful:
        members = [Member(m.id, m.endpoint, m.owned) for m in members]
        standby_replicas = 0
    ordered = sorted(members, key=lambda m: m.id)
    furthest = {t: max((m.positions.get(t, 0) for m in ordered), default=0) for t in range(tasks)}

    def lag(member: Member, task: int) -> int:
        """0 within the acceptable lag, else 1 plus the lag: the sort key of "who should get it"."""
        behind = furthest[task] - member.positions.get(task, 0)
        return 0 if behind <= acceptable_lag else 1 + behind

    if not ordered:
        return {}
    base, extra = divmod(tasks, len(ordered))
    owner: dict[int, str] = {}
    load: dict[str, int] = dict.fromkeys((m.id for m in ordered), 0)
    by_id = {m.id: m for m in ordered}
    # Who may hold one task more than the base: those that owned the most before (least movement).
    bigger = {m.id for m in sorted(ordered, key=lambda m: (-len(m.owned & set(range(tasks))), m.id))[:extra]}

    def quota(member: str) -> int:
        return base + (1 if member in bigger else 0)

    # 2. Sticky: previous owners keep their tasks within their quota (a task claimed twice, after a split
    # brain, goes to the member with the smaller id).
    for member in ordered:
        for task in sorted(member.owned):
            if task < tasks and task not in owner and load[member.id] < quota(member.id):
                owner[task] = member.id
                load[member.id] += 1
    # 3 and 4: the rest, to the best member with room.
    warming: dict[str, set[int]] = {m.id: set() for m in ordered}
    # Tasks with the most state go first, so that the member holding it still has room for them.
    unplaced = sorted((t for t in range(tasks) if t not in owner), key=lambda t: (-furthest[t], t))
    for task in unplaced:
        previous = next((m.id for m in ordered if task in m.owned), None)
        room = [m for m in ordered if load[m.id] < quota(m.id)]
        best = min(room, key=lambda m: (lag(m, task), -m.positions.get(task, -1), load[m.id], m.id))
        if previous is not None and previous != best.id and lag(best, task) > 0:
            # Moving only for balance to a member that would have to rebuild the store: warm it up first.
            owner[task] = previous
            load[previous] += 1
            warming[best.id].add(task)
            continue
        owner[task] = best.id
        load[best.id] += 1
    standbys = _standbys(ordered, owner, tasks, standby_replicas, warming)
    owners = {task: by_id[member].endpoint for task, member in owner.items()}
    endpoints = frozenset(m.endpoint for m in ordered if m.endpoint)
    return {
        m.id: Assignment(
            active=frozenset(t for t, o in owner.items() if o == m.id),
            standby=frozenset(standbys[m.id] | warming[m.id]),
            owners=owners,
            warming=frozenset(warming[m.id]),
            members=endpoints,
        )
        for m in ordered
    }


def _standbys(ordered: list[Member], owner: Mapping[int, str], tasks: int, replicas: int,
              warming: Mapping[str, set[int]]) -> dict[str, set[int]]:
    placed: dict[str, set[int]] = {m.id: set() for m in ordered}
    pairs: dict[tuple[str, str], int] = {}  # (owner, member): standbys of the owner's tasks on the member
    for task in range(tasks):
        candidates = [m for m in ordered if m.id != owner[task] and task not in warming[m.id]]
        wanted = replicas - sum(1 for m in ordered if task in warming[m.id])
        ranked = sorted(candidates, key=lambda m: (len(placed[m.id]), pairs.get((owner[task], m.id), 0),
                                                   -m.positions.get(task, -1), m.id))
        for member in ranked[:max(wanted, 0)]:
            placed[member.id].add(task)
            pairs[owner[task], member.id] = pairs.get((owner[task], member.id), 0) + 1
    return placed


# -- user data: what travels in the group protocol ---------------------------------------------------------

def encode_member(member: Member) -> bytes:
    """A member's subscription user data: version, endpoint, owned tasks, store positions."""
    endpoint = member.endpoint.encode()
    out = [struct.pack(">BH", VERSION, len(endpoint)), endpoint, struct.pack(">H", len(member.owned))]
    out += [struct.pack(">H", task) for task in sorted(member.owned)]
    out.append(struct.pack(">H", len(member.positions)))
    out += [struct.pack(">Hq", task, at) for task, at in sorted(member.positions.items())]
    return b"".join(out)


def decode_member(member_id: str, data: bytes | None) -> Member:
    """The Member behind `data` (a member that sent none, or another version, is a member with no state)."""
    if not data or data[0] != VERSION:
        return Member(member_id)
    (length,) = struct.unpack_from(">H", data, 1)
    at = 3 + length
    endpoint = data[3:at].decode()
    (count,) = struct.unpack_from(">H", data, at)
    owned = frozenset(struct.unpack_from(f">{count}H", data, at + 2))
    at += 2 + 2 * count
    (count,) = struct.unpack_from(">H", data, at)
    positions = {}
    for index in range(count):
        task, position = struct.unpack_from(">Hq", data, at + 2 + index * 10)
        positions[task] = position
    return Member(member_id, endpoint, owned, positions)


def encode_assignment(assignment: Assignment) -> bytes:
    """The user data of a member's assignment: version, standbys, warming, every member's endpoint (the
    owners' among them), and the owners map (by index into the endpoints). A decoder of an earlier engine
    reads the endpoints of members without tasks as endpoints no task names."""
    endpoints = sorted(set(assignment.owners.values()) | assignment.members)
    index = {endpoint: n for n, endpoint in enumerate(endpoints)}
    out = [struct.pack(">BH", VERSION, len(assignment.standby))]
    out += [struct.pack(">H", task) for task in sorted(assignment.standby)]
    out.append(struct.pack(">H", len(assignment.warming)))
    out += [struct.pack(">H", task) for task in sorted(assignment.warming)]
    out.append(struct.pack(">H", len(endpoints)))
    for endpoint in endpoints:
        raw = endpoint.encode()
        out += [struct.pack(">H", len(raw)), raw]
    out.append(struct.pack(">H", len(assignment.owners)))
    out += [struct.pack(">HH", task, index[e]) for task, e in sorted(assignment.owners.items())]
    return b"".join(out)


def decode_assignment(active: frozenset[int], data: bytes | None) -> Assignment:
    if not data or data[0] != VERSION:
        return Assignment(active, frozenset(), {})
    (count,) = struct.unpack_from(">H", data, 1)
    standby = frozenset(struct.unpack_from(f">{count}H", data, 3))
    at = 3 + 2 * count
    (count,) = struct.unpack_from(">H", data, at)
    warming = frozenset(struct.unpack_from(f">{count}H", data, at + 2))
    at += 2 + 2 * count
    (count,) = struct.unpack_from(">H", data, at)
    at += 2
    endpoints = []
    for _ in range(count):
        (length,) = struct.unpack_from(">H", data, at)
        endpoints.append(data[at + 2:at + 2 + length].decode())
        at += 2 + length
    (count,) = struct.unpack_from(">H", data, at)
    owners = {}
    for n in range(count):
        task, which = struct.unpack_from(">HH", data, at + 2 + 4 * n)
        owners[task] = endpoints[which]
    return Assignment(active, standby, owners, warming, frozenset(endpoints))
