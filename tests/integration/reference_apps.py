"""The engine side of the differential tests against Kafka Streams (test_against_kafka_streams.py): the same
aggregation as tests/kafka/reference/Reference.java, run by `engine worker -A
tests.integration.reference_apps:app`, configured by ITEST_APP, ITEST_TOPIC, ITEST_MODE, ITEST_A_MS and
ITEST_B_MS (Reference.java's A and B). Keys and values are plain strings; event time is the record's."""

import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "reference"), commit_interval=0.2,
                 processing_guarantee=os.environ.get("ITEST_GUARANTEE", "exactly_once"))
source = app.topic(os.environ.get("ITEST_TOPIC", "input"), key_type=str, value_type=str)
MODE = os.environ.get("ITEST_MODE", "session-count")
A, B = (int(os.environ.get(name, "1000")) / 1000 for name in ("ITEST_A_MS", "ITEST_B_MS"))

if MODE == "session-count":
    results = app.stream(source).session(A, grace=B).count("counts")
elif MODE == "sliding-count":
    results = app.stream(source).sliding(A, grace=B).count("counts")
else:
    raise ValueError(f"no mode {MODE!r}")
results.closed()  # final results on <app>-counts-closed
