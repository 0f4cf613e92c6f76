"""A standby task: a warm copy of task n's tables on this worker, kept current by following their changelogs.

The group's assignment (engine.assignor) names the standby tasks of each worker (`standby_replicas`
per task, or a warm-up before the task moves here). The table manager opens their stores and its follower
applies what it reads; the standby task names them. When n becomes active here the standby is recycled, not
closed: its stores stay open and only the tail of each changelog is replayed (Kafka Streams' "recycle").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.events import TP


@dataclass(frozen=True)
class StandbyTask:
    number: int
    changelogs: frozenset[TP]  # one per table with a changelog of its own
