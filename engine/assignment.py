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
   `acceptable_lag`), then to the member with the least lag, then to the least loaded.
4. Warm-up (KIP-441): a task that would move only for balance, to a member whose store is further behind
   than `acceptable_lag`, stays with its current owner; the new member follows it as a warm-up standby, and
   moves it once caught up (at the next rebalance, which that member asks for: `Assignment.warming`).
5. Standbys: exactly `standby_replicas` per task (at most members - 1), never on the active owner,
   preferring members that hold the store with the least lag, then the fewest standbys.
Every choice breaks ties by member id, so the same input always gives the same output.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

VERSION = 1


@dataclass(frozen=True)
class Member:
    """What a member tells the group when it joins (its subscription's user data)."""

    id: str
    endpoint: str = ""  # host:port where it answers table queries ("" if it serves none)
    owned: frozenset[int] = frozenset()  # tasks it processed before this rebalance
    lags: Mapping[int, int] = field(default_factory=dict)  # task -> changelog lag of the store it has on disk


@dataclass(frozen=True)
class Assignment:
    """One member's share, and the whole group's placement (task -> active owner's endpoint)."""

    active: frozenset[int]
    standby: frozenset[int]
    owners: Mapping[int, str]
    warming: frozenset[int] = frozenset()  # standbys that are to become active once caught up


def assign(members: Sequence[Member], tasks: int, *, standby_replicas: int = 0,
           acceptable_lag: int = 10_000, stateful: bool = True) -> dict[str, Assignment]:
    """Place `tasks` tasks (0..tasks-1) on `members` (see the module docstring). Without state (`stateful`
    false: the app has no tables) a task moves freely: nothing needs warming up, and no standbys."""
    if not stateful:
        members = [Member(m.id, m.endpoint, m.owned) for m in members]
        acceptable_lag, standby_replicas = 2**62, 0
    ordered = sorted(members, key=lambda m: m.id)
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
    # Tasks some member has a store of go first, so that member still has room for them.
    unplaced = sorted((t for t in range(tasks) if t not in owner),
                      key=lambda t: (min(_lag(m, t, acceptable_lag) for m in ordered), t))
    for task in unplaced:
        previous = next((m.id for m in ordered if task in m.owned), None)
        room = [m for m in ordered if load[m.id] < quota(m.id)]
        best = min(room, key=lambda m: (_lag(m, task, acceptable_lag), load[m.id], m.id))
        if previous is not None and previous != best.id and _lag(best, task, acceptable_lag) > 0:
            # Moving only for balance to a member that would have to rebuild the store: warm it up first.
            owner[task] = previous
            load[previous] += 1
            warming[best.id].add(task)
            continue
        owner[task] = best.id
        load[best.id] += 1
    standbys = _standbys(ordered, owner, tasks, standby_replicas, warming)
    owners = {task: by_id[member].endpoint for task, member in owner.items()}
    return {
        m.id: Assignment(
            active=frozenset(t for t, o in owner.items() if o == m.id),
            standby=frozenset(standbys[m.id] | warming[m.id]),
            owners=owners,
            warming=frozenset(warming[m.id]),
        )
        for m in ordered
    }


def _lag(member: Member, task: int, acceptable: int) -> int:
    """0 for a store within the acceptable lag, else 1 plus its lag (no store: 2**62, or 0 when any lag is
    acceptable)."""
    lag = member.lags.get(task, 2**62)
    return 0 if lag <= acceptable else 1 + lag


def _standbys(ordered: list[Member], owner: Mapping[int, str], tasks: int, replicas: int,
              warming: Mapping[str, set[int]]) -> dict[str, set[int]]:
    placed: dict[str, set[int]] = {m.id: set() for m in ordered}
    for task in range(tasks):
        candidates = [m for m in ordered if m.id != owner[task] and task not in warming[m.id]]
        wanted = replicas - sum(1 for m in ordered if task in warming[m.id])
        ranked = sorted(candidates, key=lambda m: (m.lags.get(task, 2**62), len(placed[m.id]), m.id))
        for member in ranked[:max(wanted, 0)]:
            placed[member.id].add(task)
    return placed


# -- user data: what travels in the group protocol ---------------------------------------------------------

def encode_member(member: Member) -> bytes:
    """A member's subscription user data: version, endpoint, owned tasks, store lags."""
    endpoint = member.endpoint.encode()
    out = [struct.pack(">BH", VERSION, len(endpoint)), endpoint, struct.pack(">H", len(member.owned))]
    out += [struct.pack(">H", task) for task in sorted(member.owned)]
    out.append(struct.pack(">H", len(member.lags)))
    out += [struct.pack(">Hq", task, lag) for task, lag in sorted(member.lags.items())]
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
    lags = {}
    for index in range(count):
        task, lag = struct.unpack_from(">Hq", data, at + 2 + index * 10)
        lags[task] = lag
    return Member(member_id, endpoint, owned, lags)


def encode_assignment(assignment: Assignment) -> bytes:
    """The user data of a member's assignment: version, standbys, warming, and the owners map."""
    endpoints = sorted(set(assignment.owners.values()))
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
    return Assignment(active, standby, owners, warming)
