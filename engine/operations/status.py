"""An app's group as the broker sees it (`engine status`): its members with their assignments, and how far
the group is behind on the topics it reads, per partition number (end offset minus committed offset, summed
over those topics; a partition without a committed offset counts from its first offset)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.events import TP
from engine.topology.plan import build_topology
from engine.transport import shared_transport_for

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.app import App
    from engine.settings import Settings
    from engine.transport.base import GroupDescription, Transport


@dataclass(frozen=True)
class GroupStatus:
    group: GroupDescription
    lag: dict[int, int]  # partition number -> records the group has yet to process, over the topics it reads


async def group_status(app: App, settings: Settings) -> GroupStatus:
    """The group of `app` on the broker `settings` name (not memory://: that broker lives inside the
    worker's process)."""
    return await read_status(shared_transport_for(settings, "status"), app.id,
                             build_topology(app, settings).subscribed())


async def read_status(transport: Transport, group_id: str, topics: Collection[str]) -> GroupStatus:
    """The status of group `group_id`, which reads `topics`, on `transport`'s broker."""
    admin = transport.admin()
    try:
        group = await admin.describe_group(group_id)
        committed = await admin.committed(group_id)
        counts = await admin.describe_topics()
    finally:
        await admin.close()
    tps = [TP(t, p) for t in topics if t in counts for p in range(counts[t])]
    reader = transport.consumer(group_id=None)
    await reader.start()
    try:
        bounds = await reader.offsets(tps) if tps else {}
    finally:
        await reader.stop()
    lag: dict[int, int] = {}
    for tp, (first, end) in bounds.items():
        lag[tp.partition] = lag.get(tp.partition, 0) + end - max(committed.get(tp, first), first)
    return GroupStatus(group, lag)
