"""Cron schedules for `@app.crontab` (croniter lives here and only here): when a cron expression fires next,
in a time zone. Five fields (minute hour day month weekday), or six with seconds last."""

from __future__ import annotations

from datetime import datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from engine.errors import ConfigError


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
