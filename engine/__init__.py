"""engine: Kafka Streams ideas for asyncio. Agents over topics, one event at a time, on Kafka or memory://."""

from engine.agent import Agent
from engine.app import App, Timer
from engine.clock import wall_time
from engine.errors import (
    AskTimeout,
    BrokerRefused,
    BrokerUnavailable,
    CodecError,
    ConfigError,
    DecodeError,
    DeliveryFailed,
    EncodeError,
    EngineError,
    InvalidTimestamp,
    NotRunning,
    PartitionMigrated,
    TransportError,
    WorkerFailed,
)
from engine.events import TP, Event
from engine.runtime import Worker, run_worker
from engine.settings import Settings
from engine.streams.stream import Stream
from engine.tables.base import KeyNotInPartition, PartitionNotLocal, PartitionNotReady, TableError
from engine.topics import Topic
from engine.windows import WindowRange

__all__ = [
    "TP",
    "Agent",
    "App",
    "AskTimeout",
    "BrokerRefused",
    "BrokerUnavailable",
    "CodecError",
    "ConfigError",
    "DecodeError",
    "DeliveryFailed",
    "EncodeError",
    "EngineError",
    "Event",
    "InvalidTimestamp",
    "KeyNotInPartition",
    "NotRunning",
    "PartitionMigrated",
    "PartitionNotLocal",
    "PartitionNotReady",
    "Settings",
    "Stream",
    "TableError",
    "Timer",
    "Topic",
    "TransportError",
    "WindowRange",
    "Worker",
    "WorkerFailed",
    "run_worker",
    "wall_time",
]
