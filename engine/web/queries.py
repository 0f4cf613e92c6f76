"""Answering a table query on one worker, without HTTP: read the key here if its partition is active here,
else say who owns it (the worker forwards the query there, once) or that it is moving or recovering.

Routing is the assignment's: every member hears the whole group's placement (task -> owner's endpoint, see
engine.tasks.assignment), and a table's partition n belongs to task n (tables are partitioned like the
streams that write them). A global table is answered by every worker from its own copy. A forwarded query
is never forwarded again: if the worker it reached no longer owns the partition, the answer is "moving",
so a query cannot loop between two workers whose views of the assignment differ for a moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import DecodeError, EncodeError
from engine.scope import running_as

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from engine.tables.base import BaseTable

RETRY_AFTER = 1  # seconds a client should wait before asking again about a moving or recovering partition


@dataclass(frozen=True)
class Answer:
    """What a worker says to a query: `status` and a JSON-able `body`, or `forward_to` an endpoint."""

    status: int
    body: Mapping[str, Any]
    forward_to: str | None = None
    retry_after: int | None = None


class TableQueries:
    """The queries one worker answers. `owners` gives the current assignment's task -> endpoint map (empty
    before the first assignment), `assigned` the tasks assigned here and whether each is ready (recovered),
    `endpoint` this worker's own address."""

    def __init__(self, worker: object, tables: Mapping[str, BaseTable], *,
                 owners: Callable[[], Mapping[int, str]], assigned: Callable[[], Mapping[int, bool]],
                 endpoint: Callable[[], str]) -> None:
        self._worker = worker
        self._tables = tables
        self._owners = owners
        self._assigned = assigned
        self._endpoint = endpoint

    def list_tables(self) -> Answer:
        tables = []
        with running_as(self._worker):
            for table in self._tables.values():
                kind = "windowed" if table.window is not None else table.kind
                tables.append({"name": table.name, "kind": kind, "partitions": table.partition_count,
                               "here": sorted(table.active)})
        return Answer(200, {"tables": tables})

    def get(self, name: str, key_text: str, *, forwarded: bool) -> Answer:
        """A query as a URL gives it: the table's name and the key's text."""
        table = self._tables.get(name)
        if table is None:
            return Answer(404, {"error": f"no table {name!r}; tables: {sorted(self._tables)}"})
        try:
            key = parse_key(table, key_text)
        except DecodeError as exc:
            return Answer(400, {"error": f"key {key_text!r} does not fit table {name!r}: {exc}"})
        return self.get_key(table, key, forwarded=forwarded)

    def get_key(self, table: BaseTable, key: Any, *, forwarded: bool) -> Answer:
        name = table.name
        if table.window is not None:
            return Answer(400, {"error": f"table {name!r} is windowed: window queries are not served over "
                                         "HTTP yet (engine table get --data-dir reads its windows offline)"})
        try:
            _, number = table.locate(key)
        except EncodeError as exc:
            return Answer(400, {"error": f"key {key!r} does not fit table {name!r}: {exc}"})
        with running_as(self._worker):
            part = table.active.get(number)
            if part is not None:
                found, value = table.find(key)
                here = {"table": name, "key": key, "partition": number, "worker": self._endpoint()}
                if not found:
                    return Answer(404, {**here, "error": "no such key"})
                return Answer(200, {**here, "value": value})
        if number in self._assigned():
            return Answer(503, {"error": f"partition {number} of table {name!r} is recovering on this "
                                         "worker"}, retry_after=RETRY_AFTER)
        owner = self._owners().get(number)
        if owner and owner != self._endpoint() and not forwarded:
            return Answer(0, {}, forward_to=owner)
        return Answer(503, {"error": f"partition {number} of table {name!r} is moving between workers"},
                      retry_after=RETRY_AFTER)

    def ready(self) -> Answer:
        """Ready once an assignment was heard and every task assigned here is set up (recovered)."""
        assigned = self._assigned()
        recovering = sorted(n for n, ready in assigned.items() if not ready)
        if not self._owners() and not assigned:
            return Answer(503, {"ready": False, "why": "no assignment yet"}, retry_after=RETRY_AFTER)
        if recovering:
            return Answer(503, {"ready": False, "recovering": recovering}, retry_after=RETRY_AFTER)
        return Answer(200, {"ready": True, "active": sorted(assigned)})


def key_text(table: BaseTable, key: Any) -> str:
    """The text of a key in a query's URL, which `parse_key` turns back into the key."""
    if table.plain_key_codec.name == "raw":
        raise EncodeError(f"table {table.name!r} has raw bytes keys: they cannot be named in a URL")
    encoded = table.plain_key_codec.encode(key)
    if encoded is None:
        raise EncodeError(f"table {table.name!r}: a key cannot be None")
    return encoded.decode()


def parse_key(table: BaseTable, text: str) -> Any:
    """A key as typed in a URL or on a command line, decoded with the table's own key codec (so its type is
    checked the same way as a record's); on a JSON table without a declared key type a bare word is the
    string itself."""
    codec = table.plain_key_codec
    if codec.name == "raw":
        return text.encode()
    try:
        return codec.decode(text.encode())
    except DecodeError:
        if codec.name == "json" and table.changelog_topic.key_type in (None, str):
            return text
        raise

