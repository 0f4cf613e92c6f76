"""A group's own configs (KIP-848's group configs; for a streams group, KIP-1071's `streams.*`), set and read
on the broker. Part of the Kafka transport (with kafka.py, the only modules that import aiokafka).

A streams group's coordinator assigns standby replicas, warm-ups and session timeouts by the broker's
`group.streams.*` configs unless the group has its own: `streams.num.standby.replicas` of the group is how a
worker asks for standbys (no member can ask in a heartbeat). A group's configs are a config resource of type
GROUP (32), which aiokafka's admin does not know: IncrementalAlterConfigs v1 (aiokafka has none) sets them,
DescribeConfigs (aiokafka's request, which takes any resource type) reads them. Both go to any broker, which
forwards a change to the controller. Fields as Kafka 4.4's IncrementalAlterConfigs{Request,Response}.json; v1
is flexible (compact strings and arrays, a tagged-field section ending each struct).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from aiokafka.errors import KafkaError
from aiokafka.protocol.admin import DescribeConfigsRequest
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Boolean, CompactArray, Int8, Int16, Int32, Schema

from engine.errors import ConfigError, EngineError, TransportError
from engine.transport.kafka_protocol import TAGS, TEXT

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

log = logging.getLogger(__name__)

GROUP = 32  # ConfigResource.Type.GROUP
SET = 0  # IncrementalAlterConfigs' operations: SET, DELETE (back to the broker's default), APPEND, SUBTRACT
DELETE = 1


class IncrementalAlterConfigsResponse_v1(Response):  # type: ignore[misc]  # aiokafka's classes are untyped
    API_KEY = 44
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("responses", CompactArray(("error_code", Int16), ("error_message", TEXT), ("resource_type", Int8),
                                   ("resource_name", TEXT), TAGS)),
        TAGS,
    )


class IncrementalAlterConfigsRequest_v1(RequestStruct):  # type: ignore[misc]  # (as above)
    FLEXIBLE_VERSION = True
    API_KEY = 44
    API_VERSION = 1
    RESPONSE_TYPE = IncrementalAlterConfigsResponse_v1
    SCHEMA = Schema(
        ("resources", CompactArray(
            ("resource_type", Int8), ("resource_name", TEXT),
            ("configs", CompactArray(("name", TEXT), ("config_operation", Int8), ("value", TEXT), TAGS)),
            TAGS)),
        ("validate_only", Boolean),
        TAGS,
    )


class GroupConfigsRequest(Request[IncrementalAlterConfigsRequest_v1]):  # type: ignore[misc]  # (as above)
    """Set (a value) or delete (None: back to the broker's default) each of a group's configs."""

    API_KEY = 44

    def __init__(self, group_id: str, configs: Mapping[str, str | None], validate_only: bool = False) -> None:
        self._group_id = group_id
        self._configs = configs
        self._validate_only = validate_only

    def build(self, request_struct_class: type[IncrementalAlterConfigsRequest_v1]
              ) -> IncrementalAlterConfigsRequest_v1:
        configs: list[tuple[Any, ...]] = [(name, SET if value is not None else DELETE, value, {})
                   for name, value in sorted(self._configs.items())]
        return request_struct_class([(GROUP, self._group_id, configs, {})], self._validate_only, {})


def alter_errors(response: IncrementalAlterConfigsResponse_v1) -> list[tuple[int, str | None]]:
    """(error code, the broker's message) of each resource the answer lists."""
    return [(code, message) for code, message, *_ in response.responses]


async def set_group_configs(client: Any, group_id: str, configs: Mapping[str, str | None]) -> None:
    """Set the group's configs on the broker (a value; None deletes one, back to the broker's default);
    `client` is a started AIOKafkaClient (`aiokafka_private.network_client` of an admin, a consumer's). The
    broker checks them all first and sets all or none.

    Raises ConfigError naming the configs and the broker's message when it refuses them (a name it does not
    know for groups, a value out of its bounds: `streams.num.standby.replicas` above the broker's
    `group.streams.max.standby.replicas`, no right to alter the group, a broker without group configs),
    TransportError when it cannot be asked."""
    try:
        response = await client.send(client.get_random_node(), GroupConfigsRequest(group_id, configs))
    except KafkaError as exc:
        raise TransportError(f"cannot set the configs of group {group_id!r}: {exc!r}") from exc
    for code, message in alter_errors(response):
        if code:
            listed = ", ".join(f"{name}={value}" for name, value in sorted(configs.items()))
            raise ConfigError(f"the broker refused the configs {listed} of group {group_id!r}: error {code} "
                              f"{message or '(no message)'}")


async def group_configs(client: Any, group_id: str, names: Collection[str] | None = None
                        ) -> dict[str, str]:
    """The group's configs as the broker describes them (each of `names`, or all): the group's own value or
    the broker's default; `client` as for `set_group_configs`. Raises TransportError when the broker cannot
    be asked or refuses."""
    keys = sorted(names) if names is not None else None
    try:
        response = await client.send(client.get_random_node(),
                                     DescribeConfigsRequest([(GROUP, group_id, keys)]))
    except KafkaError as exc:
        raise TransportError(f"cannot read the configs of group {group_id!r}: {exc!r}") from exc
    found: dict[str, str] = {}
    for code, message, _type, _name, entries in response.resources:
        if code:
            raise TransportError(f"cannot read the configs of group {group_id!r}: error {code} {message}")
        found.update({entry[0]: entry[1] for entry in entries})
    return found


async def set_streams_group_configs(client: Any, group_id: str, session_timeout: float,
                                    standby_replicas: int) -> None:
    """A streams group's session timeout, heartbeat interval and standby replicas are the group's configs
    (the broker's `group.streams.*` unless the group says otherwise), not a member's: set from the worker's
    settings, one at a time, each refused one said with the broker's reason (its bounds, say:
    `group.streams.min.session.timeout.ms` is 45 s unless lowered)."""
    configs: dict[str, str | None] = {
        "streams.session.timeout.ms": str(round(session_timeout * 1000)),
        "streams.heartbeat.interval.ms": str(max(1, round(session_timeout * 1000 / 3))),
        "streams.num.standby.replicas": str(standby_replicas),
    }
    try:
        await set_group_configs(client, group_id, configs)
        return
    except EngineError:
        pass
    for name, value in configs.items():  # (one at a time: to say which the broker refuses)
        try:
            await set_group_configs(client, group_id, {name: value})
        except EngineError as exc:
            log.warning("%s: the group keeps the broker's", exc)
