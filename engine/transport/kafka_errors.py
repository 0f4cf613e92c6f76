"""What a failed read of offsets from the broker becomes in engine's errors (part of the Kafka transport).

A broker restarting, a connection lost, a leader or group coordinator moving: aiokafka raises an error it
marks retriable. A read of committed or log offsets that meets one means no broker answers *now*:
BrokerUnavailable, which a task's set-up waits out (engine.tasks.manager), trying again until a broker
answers or a rebalance takes the tasks elsewhere. So does aiokafka's KafkaTimeoutError, which it raises
(marked not retriable) once it has retried those errors for `request_timeout_ms`: a broker away longer
than that (a slow restart) is still only away. Any other failure (refused, unknown topic, a bug) is a
TransportError, which stops the worker with what went wrong.
"""

from __future__ import annotations

from aiokafka.errors import KafkaTimeoutError

from engine.errors import BrokerUnavailable, TransportError


def read_failed(what: str, error: BaseException) -> TransportError:
    """The error to raise for a failed read of `what` (e.g. "cannot read committed offsets of ...")."""
    if getattr(error, "retriable", False) or isinstance(error, KafkaTimeoutError):
        return BrokerUnavailable(f"{what}: {error!r} (retriable: a broker restarting or moving)")
    return TransportError(f"{what}: {error!r}")
