"""engine status -A module:app: the group as engine's assignor placed it, asked of the broker.

Members (host, active, standby and warming-up partitions, and the store positions each reported when it
joined), then per partition: its owner, its standbys, and how far the group is behind on the topics it reads
(end offset minus committed offset, summed over them).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from cli.loader import load_app
from cli.settings_options import given_settings
from engine.tools import ask_worker, group_status

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterable

    from engine.tools import GroupDescription


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    status = sub.add_parser("status", help="the group's members, their partitions and the lag",
                            example="engine status -A examples.wordcount:app")
    status.set_defaults(run=run)


def _numbers(values: Iterable[int]) -> str:
    return ",".join(str(n) for n in sorted(values)) or "-"


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    status = asyncio.run(group_status(app, app.settings(given_settings(args))))
    group, lag = status.group, status.lag
    live = asyncio.run(_ask_members(group))
    print(f"group {app.id}: {group.state}, {len(group.members)} members")
    if group.members:
        print(f"  {'member':14} {'host':16} {'active':14} {'standby':14} {'warming':10} "
              "stores (partition:position)")
    names = {}
    for index, member in enumerate(sorted(group.members, key=lambda m: sorted(m.assignment.active))):
        name = names[member.member_id] = f"#{index + 1} {member.member_id[-8:]}"
        a = member.assignment
        asked = live.get(member.member_id)
        positions = ({int(p): n for p, n in asked["store_positions"].items()} if asked is not None
                     else member.positions)  # now, from the worker; else as it reported when it joined
        stores = " ".join(f"{p}:{n}" for p, n in sorted(positions.items())) or "-"
        print(f"  {name:14} {member.host:16} {_numbers(a.active):14} {_numbers(a.standby - a.warming):14} "
              f"{_numbers(a.warming):10} {stores}")
    print(f"{'partition':>9}  {'owner':14} {'standbys':24} {'lag':>8}")
    for partition in sorted(lag):
        owner = next((names[m.member_id] for m in group.members if partition in m.assignment.active), "-")
        standbys = ", ".join(names[m.member_id] for m in group.members if partition in m.assignment.standby)
        print(f"{partition:>9}  {owner:14} {standbys or '-':24} {lag[partition]:>8}")
    late: dict[str, int] = {}
    for answer in live.values():
        for table, count in answer.get("late_events", {}).items():
            late[table] = late.get(table, 0) + count
    for table, count in sorted(late.items()):
        print(f"table {table}: {count} late events dropped since its workers started "
              "(see docs/windows.md: grace)")
    for answer in live.values():
        for partition, jump in sorted(answer.get("offset_jumps", {}).items()):
            print(f"{partition}: its committed offset {jump['committed']} was gone from the broker "
                  f"(retention); went on at {jump['to']}, {jump['skipped']} records skipped")
    if group.members and len(live) < len(group.members):
        print(f"({len(group.members) - len(live)} members did not answer on their web address: their store "
              "positions are as they reported them when they joined)")
    return 0


async def _ask_members(group: GroupDescription) -> dict[str, Any]:
    """Each member's own /status, asked of its web address (the owners map names the owner of each task)."""
    found: dict[str, Any] = {}
    for member in group.members:
        owners = member.assignment.owners
        endpoint = next((owners[t] for t in sorted(member.assignment.active) if owners.get(t)), None)
        if endpoint is None:
            continue
        answer = await ask_worker(f"http://{endpoint}", "/status")
        if answer is not None and answer[0] == 200:
            found[member.member_id] = answer[1]
    return found
