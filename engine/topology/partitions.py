"""The partition count of each internal topic engine creates: that of the topics whose events write it, as
Kafka Streams gives a changelog or a repartition topic the count of its subtopology's source topics.

Pure: given the topology's plans, the groups of topics that must be co-partitioned, and the counts of the
topics the broker has, it says what each internal topic that does not exist yet and declares no count gets:
- the count of its co-partitioned topics whose count is fixed (existing, declared, or the user's own): a
  table takes the count of the topics whose events write it, and a repartition topic that writes a table
  takes the table's;
- otherwise, the count of the topic it follows (a repartition topic, its source's; a window's closed and
  late topics, their table's);
- otherwise, nothing: it keeps `topic_partitions`.
Groups are settled before any topic follows its source, so that a count the group fixes wins. A group whose
fixed members differ settles nothing: the topology's check refuses it with every count named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping


def followed_counts(fixed: Mapping[str, int], open_: Mapping[str, Collection[str]],
                    groups: Collection[Collection[str]]) -> dict[str, int]:
    """The counts of the `open_` topics (each with the topics it follows) that something settles, given the
    `fixed` counts of the others and the co-partitioned `groups`."""
    known = dict(fixed)
    waiting = dict(open_)
    while True:
        _settle_groups(known, waiting, groups)
        follower = next((name for name, follows in waiting.items()
                         if follows and all(f in known for f in follows)
                         and len({known[f] for f in follows}) == 1), None)
        if follower is None:
            break
        known[follower] = known[next(iter(waiting.pop(follower)))]
    return {name: count for name, count in known.items() if name in open_}


def _settle_groups(known: dict[str, int], waiting: dict[str, Collection[str]],
                   groups: Collection[Collection[str]]) -> None:
    """Give every waiting member of a group the count its known members agree on, until nothing changes."""
    changed = True
    while changed:
        changed = False
        for group in groups:
            counts = {known[name] for name in group if name in known}
            if len(counts) != 1:
                continue
            count = next(iter(counts))
            for name in group:
                if name in waiting:
                    del waiting[name]
                    known[name] = count
                    changed = True
