"""The pure assignor: balance, stickiness, standbys, warm-up, determinism and its wire format."""

from __future__ import annotations

import random

from engine.assignor import (
    Assignment,
    Member,
    assign,
    decode_assignment,
    decode_member,
    encode_assignment,
    encode_member,
)


def actives(result: dict[str, Assignment]) -> dict[str, set[int]]:
    return {member: set(a.active) for member, a in result.items()}


def members_owning(result: dict[str, Assignment], positions: dict[str, dict[int, int]] | None = None,
                   extra: tuple[str, ...] = ()) -> list[Member]:
    """The members of `result` telling the group what they own now and how far their stores read (and
    `extra` new ones)."""
    positions = positions or {}
    return [Member(m, f"{m}:80", frozenset(a.active), positions.get(m, {})) for m, a in result.items()] + [
        Member(m, f"{m}:80", frozenset(), positions.get(m, {})) for m in extra]


def test_balanced_and_every_task_once():
    result = assign([Member(f"m{i}") for i in range(3)], 10, stateful=False)
    owned = actives(result)
    assert sorted(len(tasks) for tasks in owned.values()) == [3, 3, 4]
    assert sorted(t for tasks in owned.values() for t in tasks) == list(range(10))


def test_a_fourth_member_joining_three_with_twelve_tasks_moves_exactly_three():
    first = assign([Member(f"m{i}") for i in range(3)], 12, stateful=False)
    second = assign(members_owning(first, extra=("m3",)), 12, stateful=False)
    moved = sum(len(first[m].active - second[m].active) for m in first)
    assert moved == 3
    assert len(second["m3"].active) == 3
    assert all(len(a.active) == 3 for a in second.values())


def test_a_leave_moves_only_the_leavers_tasks():
    first = assign([Member(f"m{i}") for i in range(4)], 12, stateful=False)
    staying = {m: a for m, a in first.items() if m != "m1"}
    second = assign(members_owning(staying), 12, stateful=False)
    for member, before in staying.items():
        assert before.active <= second[member].active  # nobody loses a task
    assert set().union(*(a.active for a in second.values())) == set(range(12))


def test_exactly_n_standbys_never_on_the_owner_preferring_stores():
    positions = {"m0": {5: 100_000}, "m2": {5: 50_000}}
    result = assign([Member(f"m{i}", positions=positions.get(f"m{i}", {})) for i in range(4)], 8,
                    standby_replicas=2, stateful=True, acceptable_lag=10_000)
    for task in range(8):
        holders = [m for m, a in result.items() if task in a.standby]
        owner = next(m for m, a in result.items() if task in a.active)
        assert len(holders) == 2
        assert owner not in holders
    owner5 = next(m for m, a in result.items() if 5 in a.active)
    assert owner5 == "m0", "a caught-up store takes the task"
    counts = [len(a.standby) for a in result.values()]
    assert sum(counts) == 16
    assert max(counts) - min(counts) <= 2, f"standbys spread, as far as never-on-the-owner allows: {counts}"


def test_a_members_standbys_are_spread_so_that_its_leave_keeps_the_balance():
    first = assign([Member(f"m{i}") for i in range(3)], 6, standby_replicas=1)
    read = {m: {t: 100 for t in a.active | a.standby} for m, a in first.items()}
    for leaver in first:
        holders = [next(m for m, a in first.items() if t in a.standby) for t in first[leaver].active]
        assert len(set(holders)) == len(holders), f"{leaver}'s standbys are not spread: {holders}"
        staying = {m: a for m, a in first.items() if m != leaver}
        second = assign(members_owning(staying, read), 6, standby_replicas=1)
        for task, holder in zip(sorted(first[leaver].active), holders, strict=True):
            assert task in second[holder].active


def test_standbys_are_capped_by_the_other_members():
    result = assign([Member("a"), Member("b")], 4, standby_replicas=3)
    assert all(len(a.standby) == 2 for a in result.values())


def test_warm_up_keeps_a_task_with_its_owner_until_the_new_member_caught_up():
    first = assign([Member(f"m{i}") for i in range(2)], 4, standby_replicas=0)
    read = {m: {t: 1_000_000 for t in a.active} for m, a in first.items()}  # the owners' stores: at the end
    second = assign(members_owning(first, read, extra=("m2",)), 4, acceptable_lag=10_000)
    assert second["m2"].active == frozenset()
    assert len(second["m2"].warming) == 1
    assert second["m2"].warming <= second["m2"].standby
    assert actives(second)["m0"] | actives(second)["m1"] == set(range(4))
    warming = next(iter(second["m2"].warming))
    caught_up = {**read, "m2": {warming: 995_000}}
    third = assign(members_owning(second, caught_up), 4, acceptable_lag=10_000)
    assert warming in third["m2"].active
    assert third["m2"].warming == frozenset()


def test_a_leavers_tasks_go_to_their_standbys_even_when_any_member_would_be_acceptable():
    # The leaver owned tasks 2 and 3; m2 kept a standby of 2, m1 of 3; both stores are small, so either
    # member would be within the acceptable lag: the standby still wins (by id, m1 would take task 2).
    members = [Member("m1", owned=frozenset({0}), positions={0: 100, 3: 100}),
               Member("m2", owned=frozenset({1}), positions={1: 100, 2: 100})]
    result = assign(members, 4, standby_replicas=1)
    assert result["m1"].active == {0, 3}
    assert result["m2"].active == {1, 2}


def test_a_small_table_moves_at_once_without_warming_up():
    first = assign([Member(f"m{i}") for i in range(2)], 4)
    read = {m: {t: 500 for t in a.active} for m, a in first.items()}  # 500 records: within 10,000
    second = assign(members_owning(first, read, extra=("m2",)), 4, acceptable_lag=10_000)
    assert len(second["m2"].active) == 1
    assert second["m2"].warming == frozenset()


def test_the_owners_map_gives_every_task_its_endpoint():
    result = assign([Member("a", "h1:1"), Member("b", "h2:2")], 4, stateful=False)
    owners = result["a"].owners
    assert owners == result["b"].owners
    assert {owners[t] for t in result["a"].active} == {"h1:1"}
    assert {owners[t] for t in result["b"].active} == {"h2:2"}


def test_same_input_same_output_whatever_the_order():
    rng = random.Random(7)
    members = [Member(f"m{i}", owned=frozenset(rng.sample(range(16), 3)),
                      positions={t: rng.randrange(0, 30_000) for t in rng.sample(range(16), 5)})
               for i in range(5)]
    expected = assign(members, 16, standby_replicas=1)
    for _ in range(5):
        rng.shuffle(members)
        assert assign(members, 16, standby_replicas=1) == expected


def test_user_data_round_trips():
    member = Member("x", "host:8080", frozenset({1, 7}), {1: 0, 3: 12_345_678_901})
    assert decode_member("x", encode_member(member)) == member
    assert decode_member("y", None) == Member("y")
    # c:3 is a member with no active task (only standbys, or none): named all the same, for the app's page.
    assignment = Assignment(frozenset({0}), frozenset({2, 3}), {0: "a:1", 1: "b:2", 2: "a:1"}, frozenset({3}),
                            frozenset({"a:1", "b:2", "c:3"}))
    assert decode_assignment(frozenset({0}), encode_assignment(assignment)) == assignment
    # The layout is the one before members were named: an engine before reads c:3 as an endpoint no task
    # names, and what such an engine sent reads as naming its owners only.
    earlier = Assignment(frozenset({0}), frozenset({2}), {0: "a:1", 1: "b:2"})
    assert decode_assignment(frozenset({0}), encode_assignment(earlier)).members == {"a:1", "b:2"}


def test_every_member_is_named_in_every_members_assignment_with_or_without_tasks():
    members = [Member(f"m{n}", f"host:{8080 + n}") for n in range(3)]
    assignments = assign(members, 2, standby_replicas=1)  # one member gets no active task
    assert {m: a.members for m, a in assignments.items()} == {
        m.id: frozenset({"host:8080", "host:8081", "host:8082"}) for m in members}
    assert any(not a.active for a in assignments.values())


async def test_a_member_gets_the_same_partition_numbers_of_every_topic_it_reads():
    """Co-partitioned by construction, through a transport: partition p of every topic is task p."""
    from engine.transport import open_transport
    from engine.transport.base import TopicSpec

    transport = open_transport("memory://assign-copartitioned", {})
    admin = transport.admin()
    await admin.create_topics([TopicSpec("orders", 6), TopicSpec("customers", 6), TopicSpec("small", 2)])
    got: dict[int, set] = {0: set(), 1: set()}
    consumers = []
    for index in range(2):
        async def assigned(tps, index=index):
            got[index] = set(tps)

        consumer = transport.consumer(group_id="g", on_assigned=assigned)
        consumer.subscribe(["orders", "customers", "small"])
        await consumer.start()
        consumers.append(consumer)
    for _ in range(3):
        for consumer in consumers:
            await consumer.getmany(0.01, 10)
    for tps in got.values():
        numbers = {topic: {tp.partition for tp in tps if tp.topic == topic}
                   for topic in ("orders", "customers")}
        assert numbers["orders"] == numbers["customers"]
        assert len(numbers["orders"]) == 3
        assert {tp.partition for tp in tps if tp.topic == "small"} <= numbers["orders"]
    for consumer in consumers:
        await consumer.stop()
