"""What a failed read of offsets from the broker becomes in engine's errors (part of the Kafka transport).

A broker restarting, a connection lost, a leader or group coordinator moving: aiokafka raises an error it
marks retriable. A read of committed or log offsets that meets one means no broker answers *now*:
BrokerUnavailable, which a task's set-up waits out (engine.tasks.manager), trying again until a broker
answers or a rebalance takes the tasks elsewhere; so is a client's start that meets one (a task's
producer looking for its transaction coordinator). So does aiokafka's KafkaTimeoutError, which it raises
(marked not retriable) once it has retried those errors for `request_timeout_ms`: a broker away longer
than that (a slow restart) is still only away. Any other failure (refused, unknown topic, a bug) is a
TransportError, which stops the worker with what went wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiokafka.errors import KafkaError, KafkaTimeoutError

from engine.errors import BrokerUnavailable, TransportError

if TYPE_CHECKING:
    from collections.abc import Collection

    from engine.events import TP


def retriable(error: BaseException) -> bool:
    """Whether `error` means no broker answers now: an error aiokafka marks retriable, its timeout after
    retrying such errors, or a plain KafkaError it raised from a retriable one (its producer's search for a
    transaction coordinator wraps a connection lost that way)."""
    if getattr(error, "retriable", False) or isinstance(error, KafkaTimeoutError):
        return True
    cause = error.__cause__
    return type(error) is KafkaError and cause is not None and bool(getattr(cause, "retriable", False))


def read_failed(what: str, error: BaseException, unknown: Collection[TP] = ()) -> TransportError:
    """The error to raise for a failed read of `what` (e.g. "cannot read committed offsets of ...").
    `unknown`: the partitions read that the client's metadata does not have. aiokafka retries those too
    until its timeout, so a read of a deleted topic's partitions (a changelog deleted under a running app)
    would otherwise be waited out for ever as a broker away: it stops the worker, naming them."""
    if isinstance(error, KafkaTimeoutError) and unknown:
        return TransportError(f"{what}: {error!r}; the broker does not have {sorted(unknown)} (deleted?)")
    if retriable(error):
        return BrokerUnavailable(f"{what}: {error!r} (retriable: a broker restarting or moving)")
    return TransportError(f"{what}: {error!r}")
