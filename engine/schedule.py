"""When timers run: a timer as the app declares it (`Timer`: an interval, or a cron schedule), and cron
schedules for `@app.crontab` (croniter lives here and only here): when a cron expression fires next, in a
time zone. Five fields (minute hour day month weekday), or six with seconds last."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from engine.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


@dataclass(frozen=True)
class Timer:
    name: str
    interval: timedelta
    fun: Callable[[], Awaitable[None]]
    on_leader: bool = False  # runs only on the group's leader: the worker that owns task 0
    cron: str | None = None  # a crontab's schedule (then `interval` is unused)
    timezone: tzinfo | None = None  # the crontab's time zone (None: local time)
    # Ticks at the multiples of `interval` on the wall clock (since the epoch), so that every worker's ticks
    # coincide (an export round's), instead of every `interval` from the worker's start.
    aligned: bool = False


def check(expression: str) -> None:
    """Refuse an expression croniter cannot read, naming it."""
    if not croniter.is_valid(expression):
        raise ConfigError(f"crontab {expression!r} is not a cron expression (five fields: minute hour day "
                          "month weekday, e.g. '*/5 * * * *'; a sixth, last, is seconds)")


def zone(name: str | tzinfo | None) -> tzinfo | None:
    """A time zone from its IANA name (or as given); None: the machine's local time."""
    if name is None or isinstance(name, tzinfo):
        return name
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"crontab timezone {name!r} is not an IANA time zone (e.g. 'Europe/Paris')"
                          ) from None


def next_fire(expression: str, after: datetime) -> datetime:
    """The first time strictly after `after` at which `expression` fires, on the wall clock of `after`'s
    zone (naive: local time). Computed on the naive wall time and put back in the zone: croniter given an
    aware time keeps its UTC offset, so across a daylight-saving change '0 9 * * *' would fire at 08:00."""
    fire: datetime = croniter(expression, after.replace(tzinfo=None)).get_next(datetime)
    return fire.replace(tzinfo=after.tzinfo)
