"""A windowed count whose quiet partitions close their windows by the wall clock (close_idle_after): what
`engine worker -A tests.integration.idle_apps:app` runs (ITEST_APP, ITEST_TOPIC)."""

import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "iidle"), commit_interval=0.2)
clicks = app.topic(os.environ.get("ITEST_TOPIC", "clicks"), key_type=str, value_type=dict,
                   timestamp=lambda click: click["at"])
per_window = app.stream(clicks).tumbling(10, grace=5, expires=3600, close_idle_after=2).count("clicks")
per_window.closed()  # final results on <app>-clicks-closed
