"""Foreign-key table joins: each row of a table paired with the row of another table that its foreign key
names, the two tables partitioned differently (Kafka Streams' KTable-KTable foreign-key join, KIP-213):

    orders_with_customer = orders.left_join(customers, foreign_key=lambda order: order["customer"])

Four internal agents keep the result table (keyed like the left table; values `(row, other row)`):
- `<name>-subscribe`, over the left table's changelog: each row subscribes, under its foreign key, to the
  right row, on the topic `<app>-<name>-subscription` (keyed by foreign key, so partitioned like the right
  table), with a hash of the row; a row whose foreign key changed first unsubscribes from the old one, so the
  old pairing is retracted; a deleted row unsubscribes and its result is deleted at once, and so is the
  result of a row without foreign key (kept as (row, None) under `left_join`).
- `<name>-subscriptions`, over that topic: keeps each foreign key's subscribers (a table,
  `<name>-subscriptions`, partitioned like the right table) and answers a subscription with the right row it
  has now, on `<app>-<name>-response` (keyed by the left key, so partitioned like the left table).
- `<name>-right`, over the right table's changelog: answers every subscriber of a changed (or deleted) right
  row with its new value.
- `<name>-respond`, over the responses: writes the result, unless the left row changed since it subscribed
  (its hash differs: a newer answer is on its way), so a late answer about an old pairing never wins.

Either table may be over a source topic (Kafka Streams' `builder.table`): the agents read that topic as
its changelog, each record once the table holds it (engine.tables.joins).

Keys and rows cross the topics as their tables' codecs encode them (base64 inside JSON), so any codec
works. A foreign key's subscribers are one row of the subscriptions table: a foreign key with very many
subscribers rewrites a long row on each change (Kafka Streams keeps one entry per pair).
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING, Any

from engine.codecs import JoinPair
from engine.errors import ConfigError
from engine.tables.joins import joinable

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.streams.stream import Stream
    from engine.tables.base import BaseTable
    from engine.tables.declarer import Declarer


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def join_by_foreign_key(app: Declarer, left: BaseTable, right: BaseTable, foreign_key: Callable[[Any], Any],
                        how: str, name: str | None) -> BaseTable:
    """Declare the result table of `left` joined with `right` by `foreign_key(left row)` (`how`: "inner" or
    "left") and the agents and topics that keep it."""
    if how not in ("inner", "left"):
        raise ConfigError(f"a foreign-key join is inner (join) or left (left_join), not {how!r}")
    right = joinable(app, right)
    for side in (left, right):
        if side.window is not None:
            raise ConfigError(f"table {side.name!r} cannot be joined by foreign key: it is windowed")
    result_name = name or f"{left.name}-{how}-fk-join-{right.name}"
    left_topic, right_topic = left.changelog_topic, right.changelog_topic
    left_keys, right_keys = left.plain_key_codec, right.plain_key_codec
    left_values, right_values = left.value_codec, right.value_codec
    subscriptions_topic = app.topic(
        f"{app.id}-{result_name}-subscription", key_type=right_topic.key_type,
        key_serializer=right_keys.name if right_topic.key_type is None else None, value_type=dict,
        partitions=right_topic.partitions, internal=True)
    responses = app.topic(
        f"{app.id}-{result_name}-response", key_type=left_topic.key_type,
        key_serializer=left_keys.name if left_topic.key_type is None else None, value_type=dict,
        partitions=left_topic.partitions, internal=True)
    result = app.Table(result_name, key_type=left_topic.key_type, value_type=tuple,
                       value_serializer=JoinPair(JoinPair.side(left_values, left_topic.value_type),
                                                 JoinPair.side(right_values, right_topic.value_type)),
                       key_serializer=left_keys.name if left_topic.key_type is None else None,
                       partitions=left_topic.partitions)
    subscribed = app.Table(f"{result_name}-foreign-keys", key_type=left_topic.key_type,
                           key_serializer=left_keys.name if left_topic.key_type is None else None,
                           partitions=left_topic.partitions)
    subscribers = app.Table(f"{result_name}-subscriptions", key_type=right_topic.key_type,
                            key_serializer=right_keys.name if right_topic.key_type is None else None,
                            value_type=dict, partitions=right_topic.partitions)

    def row_hash(row: Any) -> str:
        encoded = left_values.encode(row)
        return hashlib.blake2b(encoded or b"", digest_size=8).hexdigest()

    def unpaired(key: Any, row: Any) -> None:
        if how == "left":
            result[key] = (row, None)
        elif key in result:
            del result[key]

    async def subscribe(stream: Stream) -> None:
        async for key, row in stream.items():
            if key is None:
                continue  # a source topic's record without key: in no table
            found, old = subscribed.find(key)
            fk = None if row is None else foreign_key(row)
            encoded_key = _b64(left_keys.encode(key))
            if found and (row is None or fk != old):
                await subscriptions_topic.send(key=old, value={"key": encoded_key, "hash": None})
            if row is None or fk is None:
                if found:
                    del subscribed[key]
                if row is None:
                    if key in result:
                        del result[key]
                else:
                    unpaired(key, row)
                continue
            subscribed[key] = fk
            await subscriptions_topic.send(key=fk, value={"key": encoded_key, "hash": row_hash(row)})

    async def keep_subscriptions(stream: Stream) -> None:
        async for fk, subscription in stream.items():
            found, current = subscribers.find(fk)
            members = dict(current) if found else {}
            encoded_key, hashed = subscription["key"], subscription["hash"]
            if hashed is None:
                members.pop(encoded_key, None)
            else:
                members[encoded_key] = hashed
            if members:
                subscribers[fk] = members
            elif found:
                del subscribers[fk]
            if hashed is not None:
                has_row, row = right.find(fk)
                await responses.send(key=left_keys.decode(_unb64(encoded_key)), value={
                    "hash": hashed, "row": _b64(right_values.encode(row)) if has_row else None})

    async def follow_right(stream: Stream) -> None:
        async for fk, row in stream.items():
            if fk is None:
                continue
            found, members = subscribers.find(fk)
            if not found:
                continue
            encoded_row = None if row is None else _b64(right_values.encode(row))
            for encoded_key, hashed in members.items():
                await responses.send(key=left_keys.decode(_unb64(encoded_key)),
                                     value={"hash": hashed, "row": encoded_row})

    async def respond(stream: Stream) -> None:
        async for key, response in stream.items():
            found, row = left.find(key)
            if not found or row_hash(row) != response["hash"]:
                continue  # deleted or changed since it subscribed: a newer answer comes
            other = response["row"]
            if other is None:
                unpaired(key, row)
            else:
                result[key] = (row, right_values.decode(_unb64(other)))

    app.agent(left.changelog(), name=f"{result_name}-subscribe")(subscribe)
    app.agent(subscriptions_topic, name=f"{result_name}-subscriptions")(keep_subscriptions)
    app.agent(right.changelog(), name=f"{result_name}-right")(follow_right)
    app.agent(responses, name=f"{result_name}-respond")(respond)
    return result
