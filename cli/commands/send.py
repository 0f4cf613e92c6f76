"""engine send -A module:app TOPIC VALUE [--key KEY] [--timestamp-ms MS]: produce one record through the
topic's codecs; with --file PATH (or - for stdin), one record per JSON line instead:
{"key": ..., "value": ..., "timestamp_ms": ..., "headers": {"name": "text"}} (all optional but value).

A topic of the app's topology that does not exist yet is created as a worker would create it; any other
missing topic is refused (a misspelled name), unless --create says to make it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.loader import load_app
from cli.settings_options import given_settings
from engine import App, ConfigError, DecodeError, EngineError, Topic
from engine.tools import decode_text, loads, sending

if TYPE_CHECKING:
    import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("send", help="send a record (or a file of JSON lines) to a topic",
                       example='engine send -A examples.wordcount:app lines "the quick brown fox"')
    p.add_argument("topic", metavar="TOPIC", help="the topic's name (one the app declares: its codecs apply)")
    p.add_argument("value", nargs="?", metavar="VALUE", help="JSON for JSON topics, text for str topics")
    p.add_argument("--key", help="the record's key, as text (JSON for JSON-keyed topics); none by default")
    p.add_argument("--timestamp-ms", type=int, help="the record's timestamp (ms since the epoch)")
    p.add_argument("--file", help="send one record per line of this file of JSON lines (- for stdin): "
                                  '{"key": ..., "value": ..., "timestamp_ms": ..., "headers": {...}}')
    p.add_argument("--create", action="store_true",
                   help="create the topic if it does not exist (with topic_partitions partitions)")
    p.set_defaults(run=run)


def _parse(topic: Topic, text: str | None, what: str) -> Any:
    """Decode the command-line text with the topic's own codec, so its type is checked the same way."""
    if text is None:
        return None
    codec = topic.value_codec if what == "value" else topic.key_codec
    declared = topic.value_type if what == "value" else topic.key_type
    try:
        return decode_text(codec, text, declared)
    except DecodeError as exc:
        raise DecodeError(f"{what} {text!r} does not fit topic {topic.name!r}: {exc}") from None


async def _send(app: App, args: argparse.Namespace) -> None:
    settings = app.settings(given_settings(args))
    topic = app.topics.get(args.topic) or Topic(args.topic)
    if (args.file is None) == (args.value is None):
        raise ConfigError("engine send takes a VALUE or --file (one record per JSON line), not both")
    if args.file is None:
        key = _parse(topic, args.key, "key")
        value = _parse(topic, args.value, "value")
    async with sending(app, settings, topic, create=args.create) as created:
        if created is not None:
            print(f"created topic {created.name} with {created.partitions} partitions")
        if args.file is not None:
            await _send_lines(topic, args.file)
            return
        future = await topic.send(key=key, value=value, timestamp_ms=args.timestamp_ms)
        metadata: Any = await future
        print(f"sent to {metadata.topic}[{metadata.partition}] at offset {metadata.offset}")


PROGRESS_EVERY = 10_000  # records between two progress lines


async def _send_lines(topic: Topic, path: str) -> None:
    """Send every line of a JSON-lines file (or stdin) as a record, without waiting for each: the producer
    batches them; every acknowledgement is checked at the end, and a bad line stops with its number."""
    pending: list[asyncio.Future[object]] = []
    # Read as it goes, blocking: this command's loop has nothing else to do meanwhile. Closed below.
    lines = sys.stdin if path == "-" else Path(path).open(encoding="utf-8")  # noqa: ASYNC230, SIM115
    try:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = loads(line)
                if not isinstance(record, dict) or "value" not in record:
                    raise ValueError('expected an object with at least "value"')
                named = record.get("headers") or {}
                headers = [(name, str(text).encode()) for name, text in named.items()] or None
                pending.append(await topic.send(key=record.get("key"), value=record["value"],
                                                timestamp_ms=record.get("timestamp_ms"), headers=headers))
            except (ValueError, EngineError) as exc:
                raise ConfigError(f"{path}, line {number}: {exc}") from None
            if len(pending) % PROGRESS_EVERY == 0:
                print(f"sent {len(pending)} records...", file=sys.stderr, flush=True)
    finally:
        if lines is not sys.stdin:
            lines.close()
    for future in pending:
        await future
    print(f"sent {len(pending)} records to {topic.name}")


def run(args: argparse.Namespace) -> int:
    asyncio.run(_send(load_app(args.app), args))
    return 0
