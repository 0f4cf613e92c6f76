"""Answering table queries on one worker, without HTTP: read here what the partitions active here hold, else
say who owns the partition (the worker forwards the query there, once) or that it is moving or recovering.

Routing is the assignment's: every member hears the whole group's placement (task -> owner's endpoint, see
engine.assignor), and a table's partition n belongs to task n (tables are partitioned like the
streams that write them). A global table is answered by every worker from its own copy. A forwarded query
is never forwarded again: if the worker it reached no longer owns the partition, the answer is "moving",
so a query cannot loop between two workers whose views of the assignment differ for a moment.

With `stale=True` a partition this worker keeps as a standby is read from its store (what its changelog
held when last replayed, without the owner's writes since its last checkpoint) instead of asking the owner.

A range (`scan`) is answered per partition: `scan_here` reads the partitions asked for where this worker has
them and names the ones it does not; the web server asks each owner for its own and merges (engine.web).
Keys come ordered by their bytes under the table's key codec, as the stores order them.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.codecs import decode_text
from engine.errors import ConfigError, DecodeError, EncodeError, PartitionNotLocal
from engine.operations.inspect import window_entries
from engine.scope import running_as
from engine.tables.partition import MISSING
from engine.tables.versioned import VersionedTable
from engine.tables.versions import parse_time_ms

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping

    from engine.stores.base import PartitionStore
    from engine.tables.base import BaseTable

RETRY_AFTER = 1  # seconds a client should wait before asking again about a moving or recovering partition
DEFAULT_LIMIT = 100  # keys per page of a range
MAX_LIMIT = 10_000
# `GET /tables` counts a table's local keys exactly up to this many (a scan of them), and past it gives the
# stores' own estimate (RocksDB's counts overwrites and deletes not compacted yet), marked not exact.
EXACT_KEYS_UP_TO = 10_000


@dataclass(frozen=True)
class Answer:
    """What a worker says to a query: an HTTP status and a JSON-able body."""

    status: int
    body: Mapping[str, Any]
    retry_after: int | None = None


@dataclass(frozen=True)
class Forward:
    """Ask the worker at `endpoint`, which owns the key's partition."""

    endpoint: str


@dataclass(frozen=True)
class Range:
    """A range of keys, as a query gives it: from `low` to `high` (both included; None: unbounded), at
    most `limit` keys, `stale` standbys allowed."""

    low: bytes | None
    high: bytes | None
    limit: int
    stale: bool = False

    @property
    def end(self) -> bytes | None:
        """The first key bytes past the range: the smallest byte string above `high`."""
        return None if self.high is None else self.high + b"\x00"


@dataclass
class Page:
    """A range's keys found in some partitions, ordered by their bytes, and the partitions not found."""

    entries: list[tuple[bytes, Any, Any]] = field(default_factory=list)  # (key bytes, key, value)
    missing: dict[int, str] = field(default_factory=dict)  # partition -> why (moving, recovering)


class QueryError(Exception):
    """A query this worker cannot answer as asked: its Answer says why."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.body.get("error"))
        self.answer = answer


class TableQueries:
    """The queries one worker answers. `owners` gives the current assignment's task -> endpoint map (empty
    before the first assignment), `assigned` the tasks assigned here and whether each is ready (recovered),
    `standby` the store of a partition this worker keeps as a standby (or None), `standbys` the standby
    tasks here, `endpoint` this worker's own address, `workers` every worker's address the assignment names
    (those without active tasks too; by default the owners')."""

    def __init__(self, worker: object, tables: Mapping[str, BaseTable], *,
                 owners: Callable[[], Mapping[int, str]], assigned: Callable[[], Mapping[int, bool]],
                 endpoint: Callable[[], str],
                 standby: Callable[[BaseTable, int], PartitionStore | None] | None = None,
                 standbys: Callable[[], Iterable[int]] = tuple,
                 workers: Callable[[], Collection[str]] | None = None) -> None:
        self._worker = worker
        self._tables = tables
        self._owners = owners
        self._workers = workers or (lambda: set(owners().values()))
        self._assigned = assigned
        self._endpoint = endpoint
        self._standby = standby or (lambda table, number: None)
        self._standbys = standbys  # the standby tasks here

    def list_tables(self) -> Answer:
        tables = []
        with running_as(self._worker):
            for table in self._tables.values():
                kind = "windowed" if table.window is not None else table.kind
                exact = table.count_local(EXACT_KEYS_UP_TO)
                keys = exact if exact is not None else sum(p.store.approximate_len()
                                                           for p in table.active.values())
                tables.append({"name": table.name, "kind": kind, "partitions": table.partition_count,
                               "here": sorted(table.active), "local_keys": keys,
                               "local_keys_exact": exact is not None})
        return Answer(200, {"tables": tables})

    def table(self, name: str) -> BaseTable:
        table = self._tables.get(name)
        if table is None:
            raise QueryError(Answer(404, {"error": f"no table {name!r}; tables: {sorted(self._tables)}"}))
        return table

    def key(self, table: BaseTable, text: str) -> Any:
        """A key from its text in a URL, decoded with the table's key codec."""
        try:
            return parse_key(table, text)
        except DecodeError as exc:
            raise QueryError(Answer(400, {"error": f"key {text!r} does not fit table {table.name!r}: "
                                                   f"{exc}"})) from exc

    # -- one key ------------------------------------------------------------------------------------

    def get(self, name: str, key_text: str, *, forwarded: bool, window: str | None = None,
            stale: bool = False, times: Mapping[str, str] | None = None) -> Answer | Forward:
        """A query as a URL gives it: the table's name, the key's text, `window` for a windowed table
        ("latest", the default; "all"; or a window's start, in seconds or as an ISO datetime); for a
        versioned table, `times`: `as_of` (the value valid then), or `from` and `to` (the versions valid
        then), each in seconds or as an ISO datetime."""
        try:
            table = self.table(name)
            return self.get_key(table, self.key(table, key_text), forwarded=forwarded, window=window,
                                stale=stale, times=times)
        except QueryError as exc:
            return exc.answer

    def get_key(self, table: BaseTable, key: Any, *, forwarded: bool, window: str | None = None,
                stale: bool = False, times: Mapping[str, str] | None = None) -> Answer | Forward:
        name = table.name
        try:
            choice = _version_choice if isinstance(table.windowed, VersionedTable) else _window_choice
            chosen = choice(table, window, times or {})
            _, number = table.locate_key(key)
        except QueryError as exc:
            return exc.answer
        except EncodeError as exc:
            return Answer(400, {"error": f"key {key!r} does not fit table {name!r}: {exc}"})
        here = {"table": name, "key": key, "partition": number, "worker": self._endpoint()}
        with running_as(self._worker):
            found = _read_active(table, key, number, chosen)
        if found is None and stale:
            store = self._standby(table, number)
            if store is not None:
                here["stale"] = True
                found = _read_store(table, key, store, chosen)
        if found is not None:
            present, value = found
            answer = ("windows" if isinstance(chosen, str | int) else
                      "versions" if isinstance(chosen, dict) and "at" not in chosen else "value")
            if not present:
                why = {"windows": "no such window", "versions": "no version then", "value": "no such key"}
                return Answer(404, {**here, "error": why[answer]})
            return Answer(200, {**here, answer: value})
        return self._elsewhere(name, number, forwarded)

    def _elsewhere(self, name: str, number: int, forwarded: bool) -> Answer | Forward:
        """Partition `number` is not readable here: forward to its owner, or say it recovers or moves."""
        if number in self._assigned():
            return Answer(503, {"error": f"partition {number} of table {name!r} is recovering on this "
                                         "worker"}, retry_after=RETRY_AFTER)
        owner = self._owners().get(number)
        if owner and owner != self._endpoint() and not forwarded:
            return Forward(owner)
        return Answer(503, {"error": f"partition {number} of table {name!r} is moving between workers"},
                      retry_after=RETRY_AFTER)

    # -- ranges -------------------------------------------------------------------------------------

    def range_of(self, table: BaseTable, low: str | None, high: str | None, limit: str | None,
                 stale: bool) -> Range:
        """A range as a URL gives it (`from`, `to`, `limit`), checked."""
        if table.window is not None:
            raise QueryError(Answer(400, {"error": f"table {table.name!r} is windowed: ask for one key's "
                                                   "windows (GET /tables/{table}/{key}?window=all)"}))
        try:
            count = DEFAULT_LIMIT if limit is None else int(limit)
        except ValueError:
            count = 0
        if not 0 < count <= MAX_LIMIT:
            raise QueryError(Answer(400, {"error": f"limit must be a whole number from 1 to {MAX_LIMIT}, "
                                                   f"not {limit!r}"}))
        bounds = [None if text is None else _encoded(table, self.key(table, text)) for text in (low, high)]
        return Range(bounds[0], bounds[1], count, stale)

    def partitions_of(self, table: BaseTable, text: str | None) -> list[int]:
        """The partitions a range is asked of (`partitions=1,3`: a forwarded range), else all."""
        every = list(range(table.partition_count))
        if text is None:
            return every
        try:
            asked = sorted({int(n) for n in text.split(",") if n})
        except ValueError:
            asked = [-1]
        if any(n not in every for n in asked):
            raise QueryError(Answer(400, {"error": f"partitions must be among {every}, not {text!r}"}))
        return asked

    def scan_here(self, table: BaseTable, wanted: Iterable[int], asked: Range) -> Page:
        """The range's first `limit` + 1 keys of each partition `wanted` that this worker can read (one more
        than a page: whether there is a next page), merged in order; the others in `missing`."""
        page = Page()
        runs = []
        assigned = self._assigned()
        with running_as(self._worker):
            for number in wanted:
                part = table.active.get(number)
                if part is not None:
                    run = table.scan(part.store, (part.flushing or {}, part.writes()), asked.low, asked.end)
                elif asked.stale and (store := self._standby(table, number)) is not None:
                    run = table.scan(store, (), asked.low, asked.end)
                else:
                    page.missing[number] = "recovering" if number in assigned else "moving"
                    continue
                runs.append(list(itertools.islice(run, asked.limit + 1)))
        page.entries = list(itertools.islice(heapq.merge(*runs, key=lambda entry: entry[0]),
                                             asked.limit + 1))
        return page

    def owners_of(self, numbers: Iterable[int]) -> dict[str, list[int]]:
        """The partitions `numbers` grouped by the endpoint of the worker that owns them (other than this
        one); a partition without another owner is under ""."""
        owners, me = self._owners(), self._endpoint()
        grouped: dict[str, list[int]] = {}
        for number in numbers:
            owner = owners.get(number, "")
            grouped.setdefault("" if owner == me else owner, []).append(number)
        return grouped

    def other_workers(self) -> list[str]:
        """The endpoints of every other worker the assignment names (members without active tasks too)."""
        me = self._endpoint()
        return sorted({worker for worker in self._workers() if worker and worker != me})

    # -- health -------------------------------------------------------------------------------------

    def ready(self) -> Answer:
        """Ready once an assignment was heard and every task assigned here is set up (recovered). Standbys
        are reported apart (`standby`): a standby still catching up does not make a worker unready."""
        assigned = self._assigned()
        recovering = sorted(n for n, ready in assigned.items() if not ready)
        standby = sorted(self._standbys())
        if not self._owners() and not assigned:
            return Answer(503, {"ready": False, "why": "no assignment yet"}, retry_after=RETRY_AFTER)
        if recovering:
            return Answer(503, {"ready": False, "recovering": recovering, "standby": standby},
                          retry_after=RETRY_AFTER)
        return Answer(200, {"ready": True, "active": sorted(assigned), "standby": standby})


# What a key's query asks: None, a plain table's value; "latest", "all" or a window's start in ms, a windowed
# table's windows; for a versioned table, {"at": ms or None} (the value then, or the latest) or {"since": ms
# or None, "until": ms or None} (the versions then).
Choice = str | int | dict[str, int | None] | None


def _window_choice(table: BaseTable, window: str | None, times: Mapping[str, str]) -> Choice:
    """None for a plain table; "latest", "all" or a window's start in ms for a windowed one."""
    if times:
        raise QueryError(Answer(400, {"error": f"table {table.name!r} is not versioned: no "
                                               f"{'='.join(sorted(times))}= (only window=)"}))
    if table.window is None:
        if window is not None:
            raise QueryError(Answer(400, {"error": f"table {table.name!r} is not windowed: no window="}))
        return None
    if window is None or window in ("latest", "all"):
        return window or "latest"
    return _time_ms(window, "window must be latest, all, or a window's start")


def _version_choice(table: BaseTable, window: str | None, times: Mapping[str, str]) -> Choice:
    """What a versioned table's query asks: the value `as_of` a time (else the latest), or the versions
    valid `from` one time `to` another."""
    if window is not None:
        raise QueryError(Answer(400, {"error": f"table {table.name!r} is versioned: no window= (as_of=, or "
                                               "from= and to=)"}))
    if "as_of" in times:
        if set(times) != {"as_of"}:
            raise QueryError(Answer(400, {"error": "as_of= asks for one value: not with from= or to="}))
        return {"at": _time_ms(times["as_of"], "as_of must be a time")}
    if not times:
        return {"at": None}
    since = _time_ms(times["from"], "from must be a time") if "from" in times else None
    until = _time_ms(times["to"], "to must be a time") if "to" in times else None
    if since is not None and until is not None and since > until:
        raise QueryError(Answer(400, {"error": f"from ({times['from']}) is after to ({times['to']})"}))
    return {"since": since, "until": until}


def _time_ms(text: str, what: str) -> int:
    """A time given in a URL (engine.tables.versions.parse_time_ms), in ms; 400 if it is none."""
    try:
        return parse_time_ms(text, what)
    except ConfigError as exc:
        raise QueryError(Answer(400, {"error": str(exc)})) from None


def _read_active(table: BaseTable, key: Any, number: int, chosen: Choice) -> tuple[bool, Any] | None:
    """(found, value, windows or versions) from the partition active here; None if it is not active here."""
    if number not in table.active:
        return None
    try:
        if chosen is None:
            return table.find(key)
        if isinstance(chosen, dict):
            assert isinstance(table.windowed, VersionedTable)
            return _versions(*table.windowed.lookup(key, at=chosen.get("at"), since=chosen.get("since"),
                                                    until=chosen.get("until")))
        assert table.windowed is not None
        return _pick(table.windowed.windows_ms(key), chosen)
    except PartitionNotLocal:
        return None


def _read_store(table: BaseTable, key: Any, store: PartitionStore, chosen: Choice) -> tuple[bool, Any]:
    if isinstance(chosen, dict):
        assert isinstance(table.windowed, VersionedTable)
        return _versions(*table.windowed.lookup(key, at=chosen.get("at"), since=chosen.get("since"),
                                                until=chosen.get("until"), store=store))
    found = table.stored(store, key)
    if chosen is None:
        return (False, None) if found is MISSING else (True, found)
    return _pick([] if found is MISSING else found, chosen)


def _versions(found: bool, value: Any) -> tuple[bool, Any]:
    """A versioned table's answer as JSON takes it: a value, or versions as objects."""
    if isinstance(value, list):
        return found, [{"value": v.value, "valid_from": v.valid_from, "valid_to": v.valid_to} for v in value]
    return found, value


def _pick(windows: list[tuple[int, int, Any]], window: str | int) -> tuple[bool, Any]:
    if window == "latest":
        windows = windows[-1:]
    elif window != "all":
        windows = [w for w in windows if w[0] == window]
    return bool(windows), window_entries(windows)


def _encoded(table: BaseTable, key: Any) -> bytes:
    try:
        return table.locate_key(key)[0]
    except EncodeError as exc:
        raise QueryError(Answer(400, {"error": f"key {key!r} does not fit table {table.name!r}: "
                                               f"{exc}"})) from exc


def key_text(table: BaseTable, key: Any) -> str:
    """The text of a key in a query's URL, which `parse_key` turns back into the key."""
    if table.plain_key_codec.name == "raw":
        raise EncodeError(f"table {table.name!r} has raw bytes keys: they cannot be named in a URL")
    encoded = table.plain_key_codec.encode(key)
    if encoded is None:
        raise EncodeError(f"table {table.name!r}: a key cannot be None")
    return encoded.decode()


def parse_key(table: BaseTable, text: str) -> Any:
    """A key as typed in a URL or on a command line, decoded with the table's own key codec
    (engine.codecs.decode_text: on a JSON table without a declared key type a bare word is the string)."""
    return decode_text(table.plain_key_codec, text, table.changelog_topic.key_type)
