"""The app's page's views, each also served as JSON (`GET /ui/<view>`): the workers' overviews
(engine.runtime.overview), one per worker of the group, merged. Pure: what the server asked of each worker
goes in, the views come out.

    topology       the graph of topics, agents and tables (engine.topology.graph)
    group          every worker the assignment names (one without active tasks too): protocol, generation,
                   active, standby and recovering tasks, its last changes
    partitions     every partition processed, by its owner: committed offset, position, lag and its trend,
                   records per second, how long work has waited on it; agents stuck inside one event
    tables         every table: partitions and where they are, standbys and their lag, keys and bytes on
                   disk, late events, restore progress
    dead-letters   records agents failed on, and late events, counted and the latest with their reasons
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    Overview = Mapping[str, Any]

VIEWS = ("topology", "group", "partitions", "tables", "dead-letters")
# What a worker's overview has (engine.runtime.overview): an answer without them is not one.
OVERVIEW_KEYS = frozenset({"worker", "time", "protocol", "generation", "tasks", "rebalances", "changes",
                           "partitions", "stuck", "tables", "recovery", "dead_letters", "late",
                           "loop_lag_p99_ms", "agents"})
LATEST = 20  # latest dead letters and late events shown, over every worker


def app_views(topology: Mapping[str, Any], overviews: Sequence[Overview],
              unreachable: Mapping[str, str]) -> dict[str, Any]:
    """Every view of the app, from every reachable worker's overview (`unreachable`: endpoint -> why not);
    `time`: the asked worker's clock, which the page reads ages against (not the browser's)."""
    return {"app": topology.get("app"), "time": overviews[0]["time"], "topology": topology,
            "group": group(overviews, unreachable),
            "partitions": partitions(overviews), "tables": tables(overviews),
            "dead-letters": dead_letters(overviews)}


def group(overviews: Sequence[Overview], unreachable: Mapping[str, str]) -> dict[str, Any]:
    workers = [{
        "worker": o["worker"], "protocol": o["protocol"], "generation": o["generation"],
        "active": o["tasks"]["active"], "standby": o["tasks"]["standby"],
        "recovering": o["tasks"]["recovering"], "rebalances": o["rebalances"], "changes": o["changes"],
        "loop_lag_p99_ms": o["loop_lag_p99_ms"], "recovery": o["recovery"], "agents": o["agents"],
    } for o in sorted(overviews, key=lambda o: str(o["worker"]))]
    return {"workers": workers, "unreachable": dict(unreachable)}


def partitions(overviews: Sequence[Overview]) -> dict[str, Any]:
    found = [{**p, "worker": o["worker"]} for o in overviews for p in o["partitions"]]
    found.sort(key=lambda p: (p["topic"], p["partition"]))
    stuck = [{**s, "worker": o["worker"]} for o in overviews for s in o["stuck"]]
    return {"partitions": found, "stuck": stuck}


def tables(overviews: Sequence[Overview]) -> dict[str, Any]:
    merged: dict[str, dict[str, Any]] = {}
    for o in overviews:
        for t in o["tables"]:
            table = merged.setdefault(t["name"], {
                "name": t["name"], "kind": t["kind"], "global": t["global"], "partitions": t["partitions"],
                "here": {}, "standby": {}, "keys": 0, "disk_bytes": 0, "late_events": None,
                "windows_closed": None})
            if t["here"]:
                table["here"][o["worker"]] = t["here"]
            if t.get("standby"):  # (an earlier engine's overview has none)
                table["standby"][o["worker"]] = t["standby"]
            if t["global"]:  # (every worker holds all of a global table: one copy's figures)
                table["keys"] = max(table["keys"], t["keys"])
                table["disk_bytes"] = max(table["disk_bytes"], t["disk_bytes"])
            else:
                table["keys"] += t["keys"]
                table["disk_bytes"] += t["disk_bytes"]
            for counted in ("late_events", "windows_closed"):
                if t[counted] is not None:
                    table[counted] = (table[counted] or 0) + t[counted]
    recovery = {o["worker"]: o["recovery"] for o in overviews}
    return {"tables": [merged[name] for name in sorted(merged)], "recovery": recovery}


def dead_letters(overviews: Sequence[Overview]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    topics: dict[str, str] = {}
    late_counts: dict[str, int] = {}
    for o in overviews:
        for agent, count in o["dead_letters"]["counts"].items():
            counts[agent] = counts.get(agent, 0) + count
        topics.update(o["dead_letters"]["topics"])
        for table, count in o["late"]["counts"].items():
            late_counts[table] = late_counts.get(table, 0) + count
    return {"counts": counts, "topics": topics, "latest": _latest(overviews, "dead_letters"),
            "late": {"counts": late_counts, "latest": _latest(overviews, "late")}}


def _latest(overviews: Sequence[Overview], part: str) -> list[dict[str, Any]]:
    """The latest entries of `part` over every worker, each with its worker, the latest first."""
    entries = [{**entry, "worker": o["worker"]} for o in overviews for entry in o[part]["latest"]]
    return sorted(entries, key=lambda entry: -entry["at"])[:LATEST]
