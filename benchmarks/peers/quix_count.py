"""Stateful count with quixstreams: its RocksDB state, per message key."""

from quixstreams import Application

from benchmarks.peers.harness import Job

job = Job()
app = Application(broker_address=job.bootstrap, consumer_group=job.group, auto_offset_reset="earliest",
                  state_dir=job.state_dir, commit_interval=1.0, loglevel="WARNING")
words = app.topic(job.topic, key_deserializer="str", value_deserializer="json")
sdf = app.dataframe(words)


def count(n, state):
    state.set("count", state.get("count", 0) + n)
    if job.tick():
        app.stop()


sdf = sdf.update(count, stateful=True)

if __name__ == "__main__":
    app.run()
