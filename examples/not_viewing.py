"""Not viewing: users open and close the app; whoever closes it gets a "you are not viewing the app"
notification.

    engine worker -A examples.not_viewing:app
    engine send -A examples.not_viewing:app app-events '{"user": "ada", "action": "Close"}' --key ada
"""

from dataclasses import dataclass

import engine


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
notifications = app.topic("notifications", key_type=str, value_type=Notification)


@app.agent(app_events)
async def notify_closed(stream):
    async for event in stream.filter(lambda e: e.action == "Close"):
        note = Notification(user=event.user, message="you are not viewing the app")
        await notifications.send(key=event.user, value=note)
