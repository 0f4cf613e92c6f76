"""What the workers' records say about the numbers they were given (the worker tests share it)."""

from __future__ import annotations

import orjson


def numbers_of(records) -> set[int]:
    return {orjson.loads(r.value)["n"] for r in records}
