"""One app with several event-time tables and stream joins, for the differential test against Kafka Streams
over a backlog (test_event_time_against_kafka_streams.py; tests/kafka/reference/Reference.java's mode
"event-time" is the same topology): words counted in session and sliding windows (final results on
`<app>-sessions-closed` and `<app>-sliding-closed`), a stream-stream inner, left and outer join of two
topics (results on `<app>-joined`, keyed "ss-<join>:<key>", value "left|right", "null" for a missing side),
and tables over three topics joined by key (inner, left, outer) and by foreign key (inner), their results on
their changelogs. Configured by ITEST_APP, ITEST_PREFIX (the input topics: <prefix>words, <prefix>left,
<prefix>right, <prefix>t-left, <prefix>t-right, <prefix>t-orders), ITEST_GUARANTEE and ITEST_* windows:
session gap 5 s and grace 10 s, sliding windows of 30 s with a grace of 10 s, joins within 5 s, grace 2 s."""

import os

import engine

PREFIX = os.environ.get("ITEST_PREFIX", "et-")
app = engine.App(os.environ.get("ITEST_APP", "event-time"), commit_interval=0.2,
                 processing_guarantee=os.environ.get("ITEST_GUARANTEE", "exactly_once"))


def _topic(name: str) -> engine.Topic:
    return app.topic(f"{PREFIX}{name}", key_type=str, value_type=str)


words = _topic("words")
app.stream(words).session(5, grace=10).count("sessions").closed()
app.stream(words).sliding(30, grace=10).count("sliding").closed()

left, right = _topic("left"), _topic("right")
joined = app.topic(f"{app.id}-joined", key_type=str, value_type=str)


def _pair(left_value: str | None, right_value: str | None) -> str:
    return f"{'null' if left_value is None else left_value}|{'null' if right_value is None else right_value}"


@app.agent(left)
async def inner(stream):
    async for key, (left_value, right_value) in stream.join(right, within=5, grace=2).items():
        await joined.send(key=f"ss-inner:{key}", value=_pair(left_value, right_value))


@app.agent(left)
async def left_outer(stream):
    async for key, (left_value, right_value) in stream.left_join(right, within=5, grace=2).items():
        await joined.send(key=f"ss-left:{key}", value=_pair(left_value, right_value))


@app.agent(left)
async def full_outer(stream):
    async for key, (left_value, right_value) in stream.outer_join(right, within=5, grace=2).items():
        await joined.send(key=f"ss-outer:{key}", value=_pair(left_value, right_value))


left_rows = app.Table("left-rows", source_topic=_topic("t-left"))
right_rows = app.Table("right-rows", source_topic=_topic("t-right"))
orders = app.Table("orders", source_topic=_topic("t-orders"))
left_rows.join(right_rows, name="inner")
left_rows.left_join(right_rows, name="left")
left_rows.outer_join(right_rows, name="outer")
orders.join(right_rows, foreign_key=lambda row: row.split("/")[0], name="fk-inner")
