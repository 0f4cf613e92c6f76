"""Kafka's own message classes (`codec/Codec.java`, compiled against the broker's jars on first use) as the
reference for the requests engine encodes itself and the responses it decodes: Kafka decodes what engine
encoded into its JSON form, and encodes a response from that JSON form for engine to decode. No broker."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

from tests.kafka.broker import CACHE_ROOT, HERE, resolve_jars

if TYPE_CHECKING:
    from pathlib import Path

SOURCE = HERE / "codec" / "Codec.java"


def _compiled() -> tuple[Path, Path]:
    jars = resolve_jars()
    classes = CACHE_ROOT / f"codec-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]}"
    if not (classes / "Codec.class").exists():
        building = classes.with_name(classes.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        subprocess.run(["javac", "-d", str(building), "-cp", f"{jars}/*", str(SOURCE)], check=True)
        building.rename(classes)
    return jars, classes


def _run(mode: str, message: str, version: int, given: str) -> str:
    jars, classes = _compiled()
    done = subprocess.run(["java", "-cp", f"{jars}/*:{classes}", "Codec", mode, message, str(version)],
                          input=given, capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise AssertionError(f"Kafka's {message} v{version} {mode} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


def kafka_decodes(message: str, version: int, encoded: bytes) -> dict[str, Any]:
    """What Kafka reads from `encoded` (the message body, no header), in its JSON form."""
    decoded: dict[str, Any] = json.loads(_run("decode", message, version, encoded.hex()))
    return decoded


def kafka_encodes(message: str, version: int, fields: dict[str, Any]) -> bytes:
    """The message body Kafka writes for `fields` (its JSON form; absent fields take their defaults)."""
    return bytes.fromhex(_run("encode", message, version, json.dumps(fields)))
