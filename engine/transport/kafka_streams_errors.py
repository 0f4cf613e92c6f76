"""What a streams group's answers mean when they refuse (KIP-1071's error codes), and the errors engine raises
for them: each says what to do."""

from __future__ import annotations

from engine.errors import EngineError, NotAStreamsGroup, StreamsUnsupported

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


def unsupported(exc: Exception) -> StreamsUnsupported:
    """(`exc`: aiokafka's IncompatibleBrokerVersion.)"""
    return StreamsUnsupported("the broker does not offer the streams rebalance protocol (KIP-1071, Kafka "
                              f"4.1 and later): {exc}")
