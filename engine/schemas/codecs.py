"""Codecs in Confluent's wire format, through a schema registry: the part every format shares.

A registry codec is made per topic and role (key or value) from a format declaration (engine.schemas:
Avro, Protobuf, JsonSchema). Its subject follows the declared strategy (`topic`: `<topic>-key` or
`<topic>-value`, Confluent's default; `record`: the record's full name; `topic_record`: both). When a
worker starts, `prepare` registers the codec's schema under its subject (or, with `register=False`, takes
the subject's latest version): the id every record it writes carries, and a refusal (incompatible,
invalid) stops the start naming the subject and the registry's reason, instead of failing per record.

Reading, the schema id of each record picks how it is read (the writer's schema, resolved to the declared
type). An id not seen yet is never fetched on the per-record path: `decode` raises SchemasNotCached, and
whoever decodes awaits `fetch_schemas` (each id asked of the registry once, however many records name it,
retried with a WARNING while the registry is unreachable) and decodes again. An id the registry does not
have, or bytes not in the wire format, are a DecodeError naming why: the record is dead-lettered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from engine.codecs import loads
from engine.errors import (
    ConfigError,
    DecodeError,
    EncodeError,
    RegistryUnavailable,
    SchemaNotFound,
    SchemaRefused,
    SchemasNotCached,
)
from engine.schemas.wire import HEADER, WireError, frame, schema_id

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

    from engine.schemas.registry import Registry, SchemaText

SubjectStrategy = Literal["topic", "record", "topic_record"]
SUBJECT_STRATEGIES = ("topic", "record", "topic_record")
RETRY_FIRST, RETRY_MOST = 0.5, 10.0  # seconds between two tries of an unreachable registry, doubling
WARN_EVERY = 30.0  # seconds between two warnings while it stays unreachable

log = logging.getLogger(__name__)

Reader = Callable[[bytes], Any]  # a framed record (header included) -> its value


class RegistryCodec:
    """What every registry codec does: the subject, the id written, the cache of readers by id."""

    name = "registry"

    def __init__(self, *, topic: str, is_key: bool, subject: SubjectStrategy, register: bool) -> None:
        if subject not in SUBJECT_STRATEGIES:
            raise ConfigError(f"subject={subject!r}: expected one of {', '.join(SUBJECT_STRATEGIES)}")
        self.topic = topic
        self.is_key = is_key
        self.strategy = subject
        self.register = register
        self.registry: Registry | None = None
        self.subject: str | None = None
        self.write_id: int | None = None
        self._header = b""  # what every record written starts with: magic, id (and message indexes)
        self._readers: dict[int, Reader] = {}
        self._unknown: dict[int, str] = {}  # ids the registry does not have (or cannot be read): why
        self._checked: Callable[[Any], Any] | None = None  # plain data into the declared type, checked

    # -- what each format says -----------------------------------------------------------------------

    def schema_text(self) -> SchemaText:
        """The schema this codec writes with, as registered."""
        raise NotImplementedError

    def record_name(self) -> str:
        """The full name of the record this codec writes (the `record` subject strategies)."""
        raise NotImplementedError

    def payload(self, value: Any) -> bytes:
        """`value` serialized (EncodeError if it does not fit the schema)."""
        raise NotImplementedError

    def indexes(self) -> bytes:
        """The message indexes written after the id (Protobuf's; none for the others)."""
        return b""

    def adopt(self, written: SchemaText) -> None:  # most formats write their own schema
        """The schema records are written with when it is the subject's latest rather than this codec's
        own (`register=False`)."""

    async def references(self, registry: Registry) -> None:  # only Protobuf imports
        """Register what the schema imports, before the schema itself."""

    def reader(self, written: SchemaText) -> Reader:
        """How to read records written with `written` into the declared type."""
        raise NotImplementedError

    def from_text(self, text: str) -> Any:
        """A value as a person types it (`engine send`): JSON, built into the declared type checking every
        field (`_checked`, the format's own: what a person types was never checked by a schema)."""
        try:
            data = loads(text)
        except ValueError as exc:
            raise DecodeError(f"not valid JSON ({exc}): {text[:80]!r}") from exc
        return data if self._checked is None else self._checked(data)

    # -- the registry --------------------------------------------------------------------------------

    def subject_name(self) -> str:
        role = "key" if self.is_key else "value"
        if self.strategy == "topic":
            return f"{self.topic}-{role}"
        if self.strategy == "record":
            return self.record_name()
        return f"{self.topic}-{self.record_name()}"

    async def prepare(self, registry: Registry) -> None:
        """Register the schema under the subject (or take the subject's latest): the id records are written
        with. SchemaRefused names the subject; RegistryUnavailable the registry."""
        self.registry = registry
        subject = self.subject = self.subject_name()
        try:
            if self.register:
                await self.references(registry)
                registered = await registry.register(subject, self.schema_text())
            else:
                registered = await registry.latest(subject)
                self.adopt(registered.schema)
        except SchemaRefused as exc:
            raise SchemaRefused(f"the schema registry refused the {self.name} schema of topic "
                                f"{self.topic!r} ({'key' if self.is_key else 'value'}) under subject "
                                f"{subject!r}: {exc}") from exc
        except SchemaNotFound as exc:
            raise ConfigError(f"subject {subject!r} (topic {self.topic!r}) has no schema in the registry, "
                              f"and register=False: register one first ({exc})") from exc
        self.write_id = registered.schema_id
        self._header = frame(registered.schema_id, b"", self.indexes())
        # Every version of the subject is readable from here on without a fetch: the records this codec
        # wrote, and a table's values restored from a changelog holding several versions, are read
        # synchronously (a table's `get` cannot wait for the registry).
        for version in await registry.history(subject):
            if version.schema_id not in self._readers:
                try:
                    self._readers[version.schema_id] = self.reader(version.schema)
                except (ValueError, TypeError, KeyError) as exc:
                    self._unknown[version.schema_id] = (f"schema id {version.schema_id} cannot be read as "
                                                        f"{self.name}: {exc}")

    async def fetch(self, ids: Collection[int]) -> None:
        """Learn how to read records with these ids (RegistryUnavailable: none of the rest learnt)."""
        registry = self.registry
        if registry is None:
            raise ConfigError(f"the {self.name} codec of topic {self.topic!r} is not connected to a schema "
                              "registry: set schema_registry_url")
        for found in ids:
            if found in self._readers or found in self._unknown:
                continue
            try:
                written = await registry.schema(found)
            except SchemaNotFound:
                self._unknown[found] = f"schema id {found} is not in the schema registry"
                continue
            try:
                self._readers[found] = self.reader(written)
            except (ValueError, TypeError, KeyError) as exc:
                self._unknown[found] = f"schema id {found} cannot be read as {self.name}: {exc}"

    # -- the codec -----------------------------------------------------------------------------------

    def encode(self, value: Any) -> bytes | None:
        if value is None:
            return None
        if not self._header:
            raise EncodeError(f"the {self.name} codec of topic {self.topic!r} is not ready: its schema is "
                              "registered when a worker starts (or the test driver runs)")
        return self._header + self.payload(value)

    def decode(self, data: bytes | None) -> Any:
        if data is None:
            return None
        try:
            found = schema_id(data)
        except WireError as exc:
            raise DecodeError(str(exc)) from exc
        read = self._readers.get(found)
        if read is None:
            unknown = self._unknown.get(found)
            if unknown is not None:
                raise DecodeError(unknown)
            raise SchemasNotCached(self, {found})
        return read(data)

    def decode_many(self, datas: list[bytes | None]) -> list[Any]:
        """Each record read by the reader of its id, looked up once per run of one id (a batch is mostly
        of one); SchemasNotCached for every id of the batch not fetched yet, DecodeError for one that does
        not decode."""
        readers = self._readers
        decoded: list[Any] = []
        append = decoded.append
        last, read = -1, None
        for data in datas:
            if data is None:
                append(None)
                continue
            if len(data) < HEADER or data[0]:
                append(self.decode(data))  # (raises: not in the wire format)
                continue
            found = int.from_bytes(data[1:HEADER], "big")
            if found != last:
                read = readers.get(found)
                if read is None:
                    self._missing(datas)
                    append(self.decode(data))  # (raises: an id the registry does not have)
                    continue
                last = found
            assert read is not None
            append(read(data))
        return decoded

    def _missing(self, datas: list[bytes | None]) -> None:
        """Raise SchemasNotCached for the ids of `datas` neither fetched nor known missing, if any."""
        readers, unknown = self._readers, self._unknown
        missing = {found for data in datas if data is not None and len(data) >= HEADER and data[0] == 0
                   and (found := int.from_bytes(data[1:HEADER], "big")) not in readers
                   and found not in unknown}
        if missing:
            raise SchemasNotCached(self, missing)


def registry_codecs(codecs: Iterable[object]) -> list[RegistryCodec]:
    """The registry codecs among `codecs`, or wrapped by them (a codec wrapping another names it `inner`: a
    windowed table's keys, a versioned table's values), each once."""
    found: dict[int, RegistryCodec] = {}
    for codec in codecs:
        while not isinstance(codec, RegistryCodec) and hasattr(codec, "inner"):
            codec = codec.inner
        if isinstance(codec, RegistryCodec):
            found.setdefault(id(codec), codec)
    return list(found.values())


async def prepare_codecs(codecs: list[RegistryCodec], registry: Registry) -> None:
    """Connect every registry codec of an app to `registry` when a worker starts: each schema registered
    (or the latest taken). A refusal or an unreachable registry stops the start, naming the subject or the
    registry's URL."""
    for codec in codecs:
        await codec.prepare(registry)
    if codecs:
        log.info("schemas registered with %s: %s", registry.url, ", ".join(
            f"{codec.subject} (id {codec.write_id})" for codec in codecs))


async def fetch_schemas(missing: SchemasNotCached, where: str) -> None:
    """Fetch what `missing` names, retrying while the registry is unreachable (a WARNING at the first
    failure and every WARN_EVERY seconds after, naming `where` the records wait): the records that need the
    schemas wait, none is dead-lettered for it."""
    codec = missing.codec
    assert isinstance(codec, RegistryCodec)
    delay, warned, failures = RETRY_FIRST, 0.0, 0
    while True:
        try:
            await codec.fetch(missing.ids)
        except RegistryUnavailable as exc:
            failures += 1
            now = time.monotonic()
            if now - warned >= WARN_EVERY:
                warned = now
                log.warning("%s waits for schema ids %s of topic %r: %s; trying again (%d tries so far)",
                            where, sorted(missing.ids), codec.topic, exc, failures)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MOST)
            continue
        if failures:
            log.info("%s: schema ids %s of topic %r fetched after %d failed tries", where,
                     sorted(missing.ids), codec.topic, failures)
        return
