"""`@app.crontab`: the next fire time of an expression in a time zone; bad expressions and zones refused
when declared; on a running worker a schedule every second fires once per second, never early."""

from __future__ import annotations

import asyncio
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

import engine
from engine import testing
from engine.errors import ConfigError
from engine.schedule import next_fire


def test_next_fire_in_a_time_zone_and_refusals():
    paris = ZoneInfo("Europe/Paris")
    after = datetime(2026, 3, 29, 0, 58, tzinfo=paris)
    assert next_fire("*/5 * * * *", after) == datetime(2026, 3, 29, 1, 0, tzinfo=paris)
    assert next_fire("0 9 * * 1", after) == datetime(2026, 3, 30, 9, 0, tzinfo=paris)  # Monday 09:00
    app = engine.App("cron-refusals")
    with pytest.raises(ConfigError, match="'every day' is not a cron expression"):
        app.crontab("every day")
    with pytest.raises(ConfigError, match="'Nowhere/City' is not an IANA time zone"):
        app.crontab("* * * * *", timezone="Nowhere/City")


async def test_a_crontab_every_second_fires_once_per_second_never_early():
    app = engine.App("cron-every-second")
    fired: list[datetime] = []

    @app.crontab("* * * * * *", timezone="UTC", on_leader=False)  # six fields: the last is seconds
    async def tick() -> None:
        fired.append(datetime.now(ZoneInfo("UTC")))

    async with testing.running(app):
        await testing.eventually(lambda: len(fired) >= 3, 10)
        await asyncio.sleep(0)
    seconds = [moment.replace(microsecond=0) for moment in fired]
    assert len(set(seconds)) == len(seconds), "one run per second"
    assert all(moment.microsecond < 500_000 for moment in fired[:3]), "on the second, not before it"
