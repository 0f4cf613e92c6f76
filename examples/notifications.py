"""Per-user notification counts over the last 10 minutes, hopping every minute: the guard rail for the
not-viewing example, which notifies users whose app is closed. A user who got more than MUTE_AFTER
notifications within any 10 minutes is muted (sent to `mute-requests`) rather than pinged again.

Counting is on event time (`at`, when the notification went out): the windows are right even when the
records arrive late or out of order (within the 30-second grace).

    engine worker -A examples.notifications:app
    engine send -A examples.notifications:app notifications-sent --key ada \
        '{"user": "ada", "text": "come back", "at": 1767225600}'
"""

from dataclasses import dataclass
from datetime import timedelta

import engine

MUTE_AFTER = 5


@dataclass
class Notification:
    user: str
    text: str
    at: float  # when it was sent, seconds since the epoch


@dataclass
class Mute:
    user: str
    notifications: int  # in the 10 minutes that ended the newest window


app = engine.App("notifications", broker="kafka://localhost:9092")
sent = app.topic("notifications-sent", key_type=str, value_type=Notification, timestamp=lambda n: n.at)
mutes = app.topic("mute-requests", key_type=str, value_type=Mute)
recent = app.Table("recent-notifications", default=int, key_type=str, value_type=int).hopping(
    size=timedelta(minutes=10), step=timedelta(minutes=1), grace=timedelta(seconds=30),
    expires=timedelta(hours=1))


@app.agent(sent)
async def count(stream):
    async for notification in stream:
        recent[notification.user] += 1
        # The window ending within the minute after this notification: about the last 10 minutes.
        last_ten_minutes = recent[notification.user].delta(9 * 60)
        if last_ten_minutes == MUTE_AFTER + 1:  # once, as the count crosses the line
            await mutes.send(key=notification.user, value=Mute(notification.user, last_ten_minutes))
