"""Not viewing: users open and close the app. A table keeps each user's status; a timer ticks a stream of
per-user ticks, joined with the status table, and every user whose status is Close gets a "you are not
viewing the app" notification.

    engine worker -A examples.not_viewing:app
    engine send -A examples.not_viewing:app app-events '{"user": "ada", "action": "Close"}' --key ada
"""

import os
from dataclasses import dataclass

import engine

TICK_SECONDS = float(os.environ.get("NOT_VIEWING_TICK_SECONDS", "60"))


@dataclass
class AppEvent:
    user: str
    action: str  # "Open" or "Close"


@dataclass
class Notification:
    user: str
    message: str


app = engine.App("not-viewing", broker="kafka://localhost:9092")
app_events = app.topic("app-events", key_type=str, value_type=AppEvent)
ticks = app.topic("not-viewing-ticks", key_type=str, value_type=int)
notifications = app.topic("notifications", key_type=str, value_type=Notification)
status = app.Table("status", key_type=str, value_type=str)


@app.agent(app_events)
async def track(stream):
    async for event in stream:
        status[event.user] = event.action


@app.timer(TICK_SECONDS)
async def tick() -> None:
    """One tick per user this worker holds (its partitions), so each lands where that user's status is."""
    for user in list(status):
        await ticks.send(key=user, value=1)


@app.agent(ticks)
async def notify_closed(stream):
    async for user, (_, state) in stream.join(status).items():
        if state == "Close":
            await notifications.send(key=user, value=Notification(user, "you are not viewing the app"))
