"""A table as each running worker has it (engine.scope): its partitions, the topics whose events write it,
and what the worker gives it (its checkpoint, its queries, its settings, its tasks). With one worker in the
process the table reads that worker's dicts directly; with several (tests, the driver) views that pick the
current worker's."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError
from engine.tables.partition import TablePartition

if TYPE_CHECKING:
    from engine.events import TP
    from engine.scope import PerWorker
    from engine.settings import Settings
    from engine.tables.base import BaseTable


# The worker's table query (engine.web.server.WebServer.query): (table, key, a versioned table's times).
Query = Callable[["BaseTable", Any, "Mapping[str, str] | None"], Awaitable[Any]]


@dataclass
class Binding:
    """A table as one running worker has it."""

    active: dict[int, TablePartition]
    writers: set[str]
    registry: set[str] | None  # told of each topic whose events write the table (the worker's timed topics)
    checkpoint: Callable[[], Awaitable[dict[TP, int]]] | None
    query: Query | None = None  # the worker's table queries (engine.web)
    settings: Settings | None = None  # the worker's
    assigned: Callable[[], Mapping[int, bool]] | None = None  # the worker's tasks, and whether each is ready
    windows_closed: int = 0  # final results (`closed()`) its checkpoints committed


class CurrentPartitions(MutableMapping[int, TablePartition]):
    """`table.active` while several workers of the app run in this process: the partitions of the worker the
    running code belongs to; outside every worker (a test reading the table), all of them."""

    def __init__(self, bindings: PerWorker[Binding]) -> None:
        self._bindings = bindings

    def _view(self) -> dict[int, TablePartition]:
        binding = self._bindings.inside()
        if binding is not None:
            return binding.active
        merged: dict[int, TablePartition] = {}
        for other in self._bindings.values():
            merged.update(other.active)
        return merged

    def _own(self) -> dict[int, TablePartition]:
        binding = self._bindings.inside()
        if binding is None:
            raise EngineError("a table's partitions change only inside the worker that holds them")
        return binding.active

    def __getitem__(self, number: int) -> TablePartition:
        return self._view()[number]

    def get(self, number: int, default: Any = None) -> Any:
        return self._view().get(number, default)

    def __setitem__(self, number: int, part: TablePartition) -> None:
        self._own()[number] = part

    def __delitem__(self, number: int) -> None:
        del self._own()[number]

    def __iter__(self) -> Iterator[int]:
        return iter(self._view())

    def __len__(self) -> int:
        return len(self._view())


class CurrentWriters:
    """`table.writers` while several workers of the app run in this process: the current worker's."""

    def __init__(self, bindings: PerWorker[Binding]) -> None:
        self._bindings = bindings

    def _view(self) -> set[str]:
        binding = self._bindings.current()
        return binding.writers if binding is not None else set()

    def __contains__(self, topic: object) -> bool:
        return topic in self._view()

    def __iter__(self) -> Iterator[str]:
        return iter(self._view())

    def __len__(self) -> int:
        return len(self._view())

    def add(self, topic: str) -> None:
        self._view().add(topic)


TopicSet = set[str] | CurrentWriters
