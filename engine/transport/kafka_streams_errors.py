"""What a streams group's answers mean when they refuse (KIP-1071's error codes), and the errors engine raises
for them: each says what to do; and the statuses the group reports of itself, said as they come and go."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from engine.errors import EngineError, MembershipLost, NotAStreamsGroup, StreamsUnsupported, TransportError
from engine.transport.kafka_streams_group import StatusCode

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from engine.transport.kafka_streams_group import Status

log = logging.getLogger(__name__)

UNKNOWN_SERVER_ERROR = -1
UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110
STALE_MEMBER_EPOCH = 113
GROUP_ID_NOT_FOUND = 69
INVALID_REQUEST = 42
COORDINATOR_MOVED = (14, 15, 16)  # load in progress, not available, not coordinator: find it again
FENCED = (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH)


def refused(group: str, code: int, message: str | None, *, first: bool) -> EngineError:
    """A heartbeat refused for good: one line that says what to do."""
    if code == GROUP_ID_NOT_FOUND:
        return NotAStreamsGroup(
            f"group {group!r} is a live group of the classic protocol ({message}): its workers must all stop "
            "before the app starts with group_protocol=streams (committed offsets stay with the group); or "
            "run this worker with group_protocol=classic")
    if code == INVALID_REQUEST and message and "Topology updates" in message:
        return EngineError(
            f"the streams group {group!r} runs another version of this app's topology, and a live group's "
            f"topology cannot change ({message}): stop every worker of the app, then start the new version")
    return EngineError(f"the streams group {group!r} refused this worker (error {code}: {message})")


def commit_refused(failed: Mapping[tuple[str, int], int]) -> tuple[EngineError, bool]:
    """What an offset commit as a member raises when the broker refused it for `failed` (their error codes):
    MembershipLost when the member is fenced or stale (another member may own the partitions now); and
    whether the group's coordinator moved (to be found again)."""
    codes = sorted(set(failed.values()))
    if any(code in (*FENCED, STALE_MEMBER_EPOCH) for code in codes):
        return MembershipLost(f"offset commit refused: this worker is no longer the member that owns "
                              f"{sorted(failed)} (errors {codes})"), False
    moved = any(code in COORDINATOR_MOVED for code in codes)
    return TransportError(f"offset commit failed for {sorted(failed)}: errors {codes}"), moved


def unsupported(exc: Exception) -> StreamsUnsupported:
    """(`exc`: aiokafka's IncompatibleBrokerVersion.)"""
    return StreamsUnsupported("the broker does not offer the streams rebalance protocol (KIP-1071, Kafka "
                              f"4.1 and later): {exc}")


# The statuses that say the group cannot run (said once each, at WARNING, until they clear).
_BLOCKING = {StatusCode.MISSING_SOURCE_TOPICS, StatusCode.INCORRECTLY_PARTITIONED_TOPICS,
             StatusCode.MISSING_INTERNAL_TOPICS, StatusCode.STALE_TOPOLOGY, StatusCode.MISSING_CLIENT_TAGS}


class GroupStatuses:
    """The statuses a streams group's heartbeat answers report of the group: one that says it cannot run is
    said once, at WARNING, until it clears (said at INFO); a member asking the whole application to shut
    down stops this worker."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self._said: set[tuple[int, str]] = set()

    def heard(self, statuses: Sequence[Status]) -> None:
        now = {(s.code, s.detail) for s in statuses if s.code in _BLOCKING}
        for code, detail in sorted(now - self._said):
            log.warning("the streams group %r cannot run yet: %s (%s)", self.group_id,
                        StatusCode(code).name, detail)
        for code, _ in sorted(self._said - now):
            log.info("the streams group %r: %s cleared", self.group_id, StatusCode(code).name)
        self._said = now
        if any(s.code == StatusCode.SHUTDOWN_APPLICATION for s in statuses):
            raise EngineError(f"a member of the streams group {self.group_id!r} asked the whole application "
                              "to shut down")
