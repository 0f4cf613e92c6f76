"""The windowed count of window_apps.py declared as a pipeline (with a group_by through a repartition topic):
what `engine worker -A tests.integration.pipeline_apps:app` runs (ITEST_APP, ITEST_TOPIC)."""

import os

import engine

app = engine.App(os.environ.get("ITEST_APP", "ipipelines"), commit_interval=0.2,
                 processing_guarantee="exactly_once")
clicks = app.topic(os.environ.get("ITEST_TOPIC", "clicks"), key_type=str, value_type=dict,
                   timestamp=lambda click: click["at"])
per_window = (app.stream(clicks).group_by(lambda click: click["user"], key_type=str)
              .tumbling(10, grace=2, expires=600).count("clicks"))
per_window.closed()  # final results on <app>-clicks-closed
