"""engine send -A module:app TOPIC VALUE [--key KEY]: produce one record through the topic's codecs."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from cli.loader import load_app
from engine import App, ConfigError, Topic
from engine.codecs import loads
from engine.transport import open_transport

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("send", help="send one record to a topic")
    p.add_argument("topic")
    p.add_argument("value", help="JSON for JSON topics, text for str topics")
    p.add_argument("--key")
    p.set_defaults(run=run)


def _parse(topic: Topic, codec_name: str, text: str | None, what: str) -> Any:
    if text is None or codec_name != "json":
        return text.encode() if text is not None and codec_name == "raw" else text
    try:
        return loads(text)
    except ValueError:
        if (topic.value_type if what == "value" else topic.key_type) in (None, str):
            return text  # a bare word on a JSON topic means the string
        raise ConfigError(f"{what} {text!r} is not valid JSON for topic {topic.name!r}") from None


async def _send(app: App, broker: str | None, args: argparse.Namespace) -> None:
    settings = app.settings({"broker": broker})
    topic = app.topics.get(args.topic) or Topic(args.topic)
    key = _parse(topic, topic.key_codec.name, args.key, "key")
    value = _parse(topic, topic.value_codec.name, args.value, "value")
    if topic.value_type not in (None, str, bytes, int, float, bool, dict, list) and isinstance(value, dict):
        value = topic.value_type(**value)  # check the fields of a record type before sending
    producer = open_transport(settings.broker, settings.broker_options).producer()
    await producer.start()
    try:
        topic.attach(producer)
        future = await topic.send(key=key, value=value)
        metadata = await future
        print(f"sent to {args.topic}: {metadata}")
    finally:
        topic.attach(None)
        await producer.stop()


def run(args: argparse.Namespace) -> int:
    asyncio.run(_send(load_app(args.app), args.broker, args))
    return 0
