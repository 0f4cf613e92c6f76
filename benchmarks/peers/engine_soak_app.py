"""The app of benchmarks/soak.py, a day of a typical app compressed into an hour: each event joined with the
key's profile (a table over a compacted topic), counted per key into a table and per key and 10-second
tumbling window (final results on `<app>-per-window-closed`), and counted per key and session by a pipeline
(gap 5 s, final results on `<app>-sessions-closed`); the joined event goes on to SOAK_OUT_TOPIC with how long
after its sending it was processed. Exactly-once and the streams protocol unless SOAK_GUARANTEE and
SOAK_PROTOCOL say otherwise; one standby per task; RocksDB stores with a 64 MiB budget unless SOAK_STORE and
SOAK_STORE_MEMORY (bytes) say otherwise."""

import os
import time

import engine

app = engine.App(os.environ["SOAK_APP"], broker="kafka://" + os.environ["SOAK_BOOTSTRAP"],
                 processing_guarantee=os.environ.get("SOAK_GUARANTEE", "exactly_once"),
                 group_protocol=os.environ.get("SOAK_PROTOCOL", "streams"), standby_replicas=1,
                 store=os.environ.get("SOAK_STORE", "rocksdb://"),
                 store_memory=int(os.environ.get("SOAK_STORE_MEMORY", 64 << 20)))
events = app.topic(os.environ["SOAK_TOPIC"], key_type=str, value_type=dict, timestamp=lambda e: e["at"])
profiles = app.Table("profiles", source_topic=app.topic(os.environ["SOAK_PROFILES_TOPIC"], key_type=str,
                                                        value_type=str))
out = app.topic(os.environ["SOAK_OUT_TOPIC"], key_type=str, value_type=dict)
counts = app.Table("counts", default=int, key_type=str, value_type=int)
per_window = app.Table("per-window", default=int, key_type=str, value_type=int).tumbling(10, grace=2,
                                                                                         expires=60)
per_window.closed()
app.stream(events).session(5, grace=2, expires=60).count("sessions").closed()


@app.agent(events)
async def process(stream):
    async for key, (event, profile) in stream.join(profiles).items():
        counts[key] += 1
        per_window[key] += 1
        await out.send(key=key, value={"id": event["id"], "profile": profile,
                                       "latency": time.time() - event["sent"]})
