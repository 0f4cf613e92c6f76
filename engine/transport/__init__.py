"""Transports: where records come from and go to. `open_transport` picks one by URL scheme."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError
from engine.transport.base import (
    Admin,
    ClientTuning,
    Consumer,
    PartitionsCallback,
    Producer,
    TopicSpec,
    Transport,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from engine.settings import Settings


def open_transport(url: str, options: Mapping[str, Any] | None = None,
                   tuning: ClientTuning | None = None) -> Transport:
    """The transport for a broker URL; aiokafka is imported only when a kafka:// URL is used. `tuning`: the
    worker's settings for its clients (linger, session and transaction timeouts)."""
    scheme = url.split("://", 1)[0]
    if scheme == "memory":
        from engine.transport.memory import MemoryTransport

        return MemoryTransport(url)
    if scheme == "kafka":
        from engine.transport.kafka import KafkaTransport

        return KafkaTransport(url, options or {}, tuning or ClientTuning())
    raise ConfigError(f"unknown broker scheme {scheme!r} in {url!r}; use kafka:// or memory://")


def transport_for(settings: Settings, tuning: ClientTuning | None = None) -> Transport:
    """The transport of an app's settings: its broker, with its security settings and broker_options."""
    return open_transport(settings.broker, settings.client_options(), tuning)


def shared_transport_for(settings: Settings, command: str, *, otherwise: str = "") -> Transport:
    """`transport_for`, for a command that works on the broker the app's workers use, from a process of its
    own (`engine send`, `engine status`): an in-memory broker is refused, since it lives inside one
    process, and this one would see nothing of the workers' and leave nothing for them. `otherwise`: what
    else the user may do, added to the message."""
    if settings.transport_scheme == "memory":
        raise ConfigError(f"engine {command} cannot use {settings.broker}: an in-memory broker lives inside "
                          "one process, so this command would see nothing of the app's workers and leave "
                          f"nothing for them; run it against Kafka (--broker kafka://host:port){otherwise}")
    return transport_for(settings)


__all__ = [
    "Admin", "ClientTuning", "Consumer", "PartitionsCallback", "Producer", "TopicSpec", "Transport",
    "open_transport", "shared_transport_for", "transport_for",
]
