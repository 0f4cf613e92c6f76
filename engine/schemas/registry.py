"""The schema registry, as engine talks to it: Confluent's Schema Registry API (Confluent's own registry,
Apicurio's `/apis/ccompat/v7`, Redpanda's, Karapace), through Confluent's own asynchronous client.

Confluent's client lives here and only here. It is the reference implementation of the API (basic auth,
TLS, several URLs, the error codes) and asynchronous, so the registry is asked on the event loop without a
thread; `memory://` is its in-memory registry (the test driver, the demo). The codecs ask it only when
a worker starts (their subjects registered or looked up) and for a schema id they have not seen (once per
id): never per record.

Its answers are told apart as engine acts on them: unreachable (RegistryUnavailable: a worker waits and
retries, or refuses to start), a schema or subject it does not have (SchemaNotFound: that record is dead
lettered), and a schema refused (SchemaRefused: incompatible with the subject's earlier versions, or
invalid; the registry's own reason kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka.schema_registry import (
    AsyncSchemaRegistryClient,
    Schema,
    SchemaReference,
    SchemaRegistryError,
)
from confluent_kafka.schema_registry._async.mock_schema_registry_client import AsyncMockSchemaRegistryClient

# The HTTP library the client was built with (httpx, or its successor httpx2): its TransportError is how the
# client says the registry could not be reached. Private to the client, and the one name of it used here.
from confluent_kafka.schema_registry.common._httpx_compat import httpx

from engine.errors import EngineError, RegistryUnavailable, SchemaNotFound, SchemaRefused

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(frozen=True)
class Reference:
    """A schema another one imports (a Protobuf import, an Avro named type), by the subject it is
    registered under."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class SchemaText:
    """A schema as the registry holds it: its text, its type (AVRO, PROTOBUF, JSON) and what it imports."""

    text: str
    kind: str
    references: tuple[Reference, ...] = ()


@dataclass(frozen=True)
class Registered:
    """A schema registered under a subject: its id and version there."""

    schema_id: int
    version: int
    schema: SchemaText


_MEMORY: dict[str, Any] = {}  # the in-memory registries of this process, by name

NOT_FOUND = (40401, 40402, 40403, 40404)  # subject, version, schema, subject soft-deleted


class Registry:
    """One registry (its URL, credentials and TLS files), shared by every codec of a worker."""

    def __init__(self, url: str, *, auth: str | None = None, cafile: str | None = None,
                 certfile: str | None = None, keyfile: str | None = None, timeout: float = 10.0) -> None:
        self.url = url
        self._client: Any
        if url.startswith("memory://"):  # one per name in a process, as the in-memory broker
            name = url[len("memory://"):]
            if name not in _MEMORY:
                _MEMORY[name] = AsyncMockSchemaRegistryClient({"url": f"mock://{name or 'default'}"})
            self._client = _MEMORY[name]
            return
        conf: dict[str, Any] = {"url": url, "timeout": timeout, "max.retries": 1}
        if auth is not None:
            conf["basic.auth.user.info"] = auth
        if cafile is not None:
            conf["ssl.ca.location"] = cafile
        if certfile is not None:
            conf["ssl.certificate.location"] = certfile
            conf["ssl.key.location"] = keyfile
        self._client = AsyncSchemaRegistryClient(conf)

    async def schema(self, schema_id: int) -> SchemaText:
        """The schema with this id (the client caches it)."""
        found = await self._call(self._client.get_schema, schema_id)
        return _text(found)

    async def register(self, subject: str, schema: SchemaText) -> Registered:
        """Register `schema` under `subject` (a schema already there keeps its id and version)."""
        asked = _schema(schema)
        registered = await self._call(self._client.register_schema_full_response, subject, asked)
        version = registered.version
        if version is None:  # (some registries answer the id alone)
            version = (await self._call(self._client.lookup_schema, subject, asked)).version
        return Registered(int(registered.schema_id), int(version or 0), schema)

    async def lookup(self, subject: str, schema: SchemaText) -> Registered:
        """The id and version of `schema` under `subject`, without registering it (SchemaNotFound: never
        registered there)."""
        found = await self._call(self._client.lookup_schema, subject, _schema(schema))
        return Registered(int(found.schema_id), int(found.version), schema)

    async def latest(self, subject: str) -> Registered:
        """The latest version registered under `subject`."""
        found = await self._call(self._client.get_latest_version, subject)
        return Registered(int(found.schema_id), int(found.version), _text(found.schema))

    async def history(self, subject: str) -> list[Registered]:
        """Every version registered under `subject`, oldest first."""
        versions = await self._call(self._client.get_versions, subject)
        return [await self.version(subject, int(v)) for v in sorted(versions)]

    async def version(self, subject: str, version: int) -> Registered:
        found = await self._call(self._client.get_version, subject, version)
        return Registered(int(found.schema_id), int(found.version), _text(found.schema))

    async def close(self) -> None:
        if not self.url.startswith("memory://"):  # (an in-memory one lives as long as the process)
            await self._client.aclose()

    async def _call(self, method: Any, *args: Any) -> Any:
        try:
            return await method(*args)
        except SchemaRegistryError as exc:
            reason = exc.error_message or str(exc)
            if exc.error_code in NOT_FOUND or exc.http_status_code == 404:
                raise SchemaNotFound(reason) from exc
            if exc.http_status_code in (409, 422):
                raise SchemaRefused(reason) from exc
            if exc.http_status_code in (401, 403):
                raise EngineError(f"the schema registry at {self.url} refused the credentials: "
                                  f"{reason}") from exc
            raise RegistryUnavailable(f"the schema registry at {self.url} failed: {exc.http_status_code} "
                                      f"{reason}") from exc
        except (httpx.TransportError, OSError, TimeoutError) as exc:
            raise RegistryUnavailable(f"the schema registry at {self.url} is unreachable: "
                                      f"{type(exc).__name__}: {exc}") from exc


def _schema(schema: SchemaText) -> Schema:
    return Schema(schema.text, schema.kind, [SchemaReference(r.name, r.subject, r.version)
                                              for r in schema.references])


def _text(schema: Schema) -> SchemaText:
    references: Sequence[SchemaReference] = schema.references or ()
    return SchemaText(str(schema.schema_str), str(schema.schema_type or "AVRO"),
                      tuple(Reference(str(r.name), str(r.subject), int(r.version or 0)) for r in references))


def memory_client(name: str) -> Any:
    """Confluent's own client of the in-memory registry `name` (`memory://name`): what a test hands
    Confluent's serializers, to hold engine's records to them without a registry server."""
    Registry(f"memory://{name}")
    return _MEMORY[name]
