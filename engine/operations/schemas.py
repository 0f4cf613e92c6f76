"""The schema registry a worker or a tool connects its registry codecs to, from the settings: one place that
reads `schema_registry_url` and its credentials, for `engine worker` and for the tools (`engine send`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.errors import ConfigError
from engine.optional import needs
from engine.schemas.codecs import prepare_codecs, registry_codecs

if TYPE_CHECKING:
    from collections.abc import Iterable

    from engine.schemas.registry import Registry
    from engine.settings import Settings
    from engine.topics import Topic


async def connect_schemas(topics: Iterable[Topic], settings: Settings) -> Registry | None:
    """Connect the registry codecs of `topics` to the registry the settings name (their schemas registered
    or looked up: a refusal, or a registry that does not answer, raises here); the registry, for the caller
    to close, or None if no topic is in a registry format."""
    codecs = registry_codecs(codec for topic in topics for codec in (topic.key_codec, topic.value_codec))
    if not codecs:
        return None
    url = settings.schema_registry_url
    if url is None:
        names = ", ".join(sorted({c.topic for c in codecs}))
        raise ConfigError(f"topics {names} are declared in a schema registry format: set "
                          "schema_registry_url (ENGINE_SCHEMA_REGISTRY_URL)")
    with needs("confluent-kafka", "a schema registry", extra="schemas"):
        from engine.schemas.registry import Registry
    registry = Registry(url, auth=settings.schema_registry_auth, cafile=settings.schema_registry_cafile,
                        certfile=settings.schema_registry_certfile, keyfile=settings.schema_registry_keyfile)
    try:
        await prepare_codecs(codecs, registry)
    except BaseException:
        await registry.close()
        raise
    return registry
