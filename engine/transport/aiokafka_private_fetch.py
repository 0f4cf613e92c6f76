"""aiokafka's private parts behind reading a consumer's fetches a batch at a time (a quarantine room, as
engine.transport.aiokafka_private: each use explained, each checked by
tests/contract/test_aiokafka_private.py).

The records a consumer's fetches are unpacked into (`bare_records`): aiokafka makes a `ConsumerRecord` (a
dataclass of eleven fields) of each record its batch parser made, one generator step and two method calls
per record, and the public API returns only those. engine's records need no topic or partition of their own
(their batch says it: engine.events.RawRecord), so a consumer of engine's reads each fetched batch whole
(`list(batch)`, in C) and returns the parser's records as they are, with aiokafka's rules for what a fetch
returns kept: aborted transactions' batches and control batches skipped under read_committed, records
before the fetch offset dropped, the position moved to what was returned, at most `max_records` per call.
What that saves per record is in benchmarks/README.md.

The reader relies on aiokafka's fetcher storing each partition's `FetchResult` in its `_records`, and on
what `FetchResult` and `PartitionRecords` hold. `batch_reader_misfit` checks those against the installed
aiokafka when a consumer starts (the same checks as the contract test): a misfit (an aiokafka whose
internals moved) leaves the consumer reading through aiokafka's public `getmany`, with a warning naming what
changed, as does the setting `fetch_batches=False`.
"""

from __future__ import annotations

import collections
import functools
import inspect
import logging
import sys
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer
from aiokafka.consumer.fetcher import READ_COMMITTED, Fetcher, FetchResult, PartitionRecords
from aiokafka.errors import CorruptRecordException

if TYPE_CHECKING:
    from collections.abc import Mapping

log = logging.getLogger(__name__)


@functools.cache
def batch_reader_misfit() -> str | None:
    """What of aiokafka's internals the batch reader relies on is not where it expects it in the installed
    aiokafka (None: all is). Checked once per process."""
    for name in ("check_assignment", "has_more", "_update_position", "getall"):
        if not hasattr(FetchResult, name):
            return f"FetchResult.{name}"
    for name in ("_consume_aborted_up_to", "_contains_abort_marker"):
        if not callable(getattr(PartitionRecords, name, None)):
            return f"PartitionRecords.{name}"
    try:  # (the modules' text searched, not their classes' source: that takes tokenizing, 40 times longer)
        fetcher = Path(inspect.getfile(Fetcher)).read_text()  # (PartitionRecords is in the same module)
        consumer = Path(inspect.getfile(AIOKafkaConsumer)).read_text()
    except (OSError, TypeError) as exc:
        return f"aiokafka's source, to check it against ({exc})"
    if "self._records[tp] = FetchResult(" not in fetcher:
        return "Fetcher._records"
    for name in ("self._records", "self.next_fetch_offset", "self._check_crcs", "self._isolation_level",
                 "self._aborted_producers", "self._tp", "self._records_iterator"):
        if name not in fetcher:
            return f"PartitionRecords: {name}"
    for name in ("self._fetcher", "self._key_deserializer", "self._value_deserializer"):
        if name not in consumer:
            return f"AIOKafkaConsumer: {name}"
    return None


def read_batches(consumer: Any) -> None:
    """Make a started consumer read its fetches a batch at a time (`bare_records`), unless the batch reader
    does not fit the installed aiokafka: then it reads through aiokafka's public getmany, said once per
    process (every consumer would say the same)."""
    misfit = batch_reader_misfit()
    if misfit is None:
        bare_records(consumer)
    else:
        _say_misfit(misfit)


@functools.cache  # (once per process)
def _say_misfit(misfit: str) -> None:
    log.warning("engine's batch reader of aiokafka's fetches does not fit the installed aiokafka (%s "
                "changed): records are read through aiokafka's public getmany, a record at a time (slower); "
                "fetch_batches=false says this is meant", misfit)


def bare_records(consumer: Any) -> None:
    """Make a started consumer's fetches return the records aiokafka's batch parser made (offset, timestamp,
    key, value, headers), read a batch at a time, not a `ConsumerRecord` copy of each made one at a time.
    Each partition's fetch becomes a `FetchResult` stored in the fetcher's `_records`, whose `getall` is
    what `getmany` takes its records from; `_records` is replaced by a dict that gives each result stored
    a `getall` of engine's (`_BatchReader`). (A consumer given key or value deserializers is left as it
    is: aiokafka applies those as it copies.)"""
    if consumer._key_deserializer is not None or consumer._value_deserializer is not None:
        return
    fetcher = consumer._fetcher
    if not isinstance(fetcher._records, _BareFetched):
        fetcher._records = _BareFetched(fetcher._records)


class _BareFetched(collections.OrderedDict[Any, Any]):
    """A fetcher's `_records` (aiokafka uses only a dict's operations on it) whose fetch results are read
    by `_BatchReader`."""

    def __init__(self, results: Mapping[Any, Any]) -> None:
        super().__init__()
        for tp, result in results.items():
            self[tp] = result

    def __setitem__(self, tp: Any, result: Any) -> None:
        if type(result) is FetchResult:  # (else a FetchError)
            result.getall = _BatchReader(result).getall
            # (aiokafka's record generator, never started now, would keep its PartitionRecords in a cycle)
            result._partition_records._records_iterator = None
        super().__setitem__(tp, result)


class _BatchReader:
    """`FetchResult.getall` a batch at a time. aiokafka's reads its `PartitionRecords` a record at a time
    (`_unpack_records`); this reads the same batches whole, by the same rules (the aborted transactions'
    producers, control batches, records before the fetch offset), and keeps its `next_fetch_offset` and
    the partition's position as aiokafka's would be after returning the same records. A reading that
    failed (a corrupt batch) ends the result, as aiokafka's generator ends when it raises: the next call
    returns nothing, and the fetcher fetches again from the position.

    The result holds this reader's `getall`; the reader holds the result weakly, so that a result read
    to its end is freed at once, not by the cyclic garbage collector, with the fetched data it holds."""

    __slots__ = ("_at", "_batch_end", "_failed", "_ready", "_result")

    def __init__(self, result: Any) -> None:
        self._result = weakref.ref(result)
        self._ready: list[Any] = []  # the records of the batch being returned
        self._at = 0  # how many of them were returned
        self._batch_end = 0  # that batch's next offset
        self._failed = False

    def getall(self, max_records: int | None = None) -> list[Any]:
        result = self._result()
        if result is None or not result.check_assignment(result._topic_partition) or not result.has_more():
            return []
        if self._failed:
            result._update_position()
            result._partition_records = None
            return []
        try:
            return self._take(result, max_records)
        except BaseException:
            self._failed = True
            raise

    def _take(self, result: Any, max_records: int | None) -> list[Any]:
        unpacked = result._partition_records
        limit = max_records if max_records is not None else sys.maxsize
        taken: list[Any] = []
        exhausted = False
        while len(taken) < limit:
            ready, at = self._ready, self._at
            if at >= len(ready):
                if ready:  # past the batch's end (aiokafka moves there only when asked for more)
                    unpacked.next_fetch_offset = self._batch_end
                    self._ready = []
                if not self._next_batch(unpacked):
                    exhausted = True
                    break
                continue
            chunk = ready[at:at + limit - len(taken)]
            taken += chunk
            self._at = at + len(chunk)
            unpacked.next_fetch_offset = chunk[-1].offset + 1
        result._update_position()
        if exhausted:
            result._partition_records = None
        return taken

    def _next_batch(self, unpacked: Any) -> bool:
        """The next batch with records to return made ready; False when none is left."""
        memory = unpacked._records
        while memory.has_next():
            batch = memory.next_batch()
            if unpacked._check_crcs and not batch.validate_crc():
                raise CorruptRecordException(f"Invalid CRC - {unpacked._tp}")
            if unpacked._isolation_level == READ_COMMITTED and batch.producer_id is not None:
                unpacked._consume_aborted_up_to(batch.base_offset)
                if batch.is_control_batch and unpacked._contains_abort_marker(batch):
                    unpacked._aborted_producers.discard(batch.producer_id)
                if batch.is_transactional and batch.producer_id in unpacked._aborted_producers:
                    unpacked.next_fetch_offset = batch.next_offset
                    continue
            if batch.is_control_batch:
                unpacked.next_fetch_offset = batch.next_offset
                continue
            records = list(batch)
            start = unpacked.next_fetch_offset
            if records and records[0].offset < start:  # (a compressed message set fetched from inside it)
                records = [record for record in records if record.offset >= start]
            if not records:
                unpacked.next_fetch_offset = batch.next_offset
                continue
            self._ready, self._at, self._batch_end = records, 0, batch.next_offset
            return True
        return False
