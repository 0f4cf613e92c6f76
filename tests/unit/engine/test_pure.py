"""Offsets, codecs, settings and the partitioner: pure code, no event loop."""

import tracemalloc
from dataclasses import dataclass
from datetime import timedelta

import pytest

from engine import ConfigError, DecodeError, EncodeError
from engine.codecs import codec_for, decode_text, dumps
from engine.partitioner import KeyHashes, murmur2, partition_for
from engine.settings_load import load_settings
from engine.tasks.offsets import OffsetTracker


def test_commit_point_is_last_contiguous_ack_plus_one():
    tracker = OffsetTracker()
    for offset in (10, 11, 12, 13):
        tracker.track(offset)
    assert tracker.committable() is None
    tracker.ack(12)
    assert tracker.committable() is None, "12 finished but 10 and 11 did not"
    tracker.ack(10)
    assert tracker.committable() == 11
    tracker.ack(11)
    assert tracker.committable() == 13, "11 closes the gap up to 12"
    tracker.mark_committed(13)
    assert tracker.committable() is None
    tracker.ack(13)
    assert tracker.committable() == 14
    assert tracker.in_flight == 0


def test_offsets_with_gaps_commit_past_the_last_done():
    tracker = OffsetTracker()
    for offset in (5, 9, 20):  # compacted topic: gaps between offsets
        tracker.track(offset)
    tracker.ack(9)
    tracker.ack(5)
    assert tracker.committable() == 10


def test_a_run_of_the_oldest_records_in_flight_is_acked_at_once_and_anything_else_is_refused():
    tracker = OffsetTracker()
    drained: list[bool] = []
    tracker.on_drained = lambda: drained.append(True)
    tracker.track_many([3, 5, 6, 9, 10])  # (a compacted topic's gaps)
    assert not tracker.ack_run(5, 6, 2), "not the oldest in flight: 3 is"
    assert not tracker.ack_run(3, 9, 2), "the second record in flight is 5, not 9"
    assert not tracker.ack_run(3, 10, 6), "more than are in flight"
    assert tracker.committable() is None
    assert tracker.ack_run(3, 6, 3)
    assert (tracker.committable(), tracker.in_flight, drained) == (7, 2, [])
    assert tracker.ack_run(9, 10, 2)
    assert (tracker.committable(), tracker.in_flight, drained) == (11, 0, [True])

    shared = OffsetTracker()
    shared.track(0, shares=2)
    shared.track(1)
    assert not shared.ack_run(0, 1, 2), "offset 0 waits for a second agent's ack"
    out_of_order = OffsetTracker()
    out_of_order.track_many([0, 1, 2, 3])
    out_of_order.ack(2)
    assert not out_of_order.ack_run(0, 1, 2), "2 was acked before 0 and 1: one by one"
    out_of_order.ack(0)
    out_of_order.ack(1)
    assert out_of_order.committable() == 3


def test_kafka_partitioner_vectors():
    # Values from Kafka's Java client (Utils.murmur2) test vectors.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert partition_for(b"foobar", 4) == (-790332482 & 0x7FFFFFFF) % 4


def test_cached_key_hashes_pick_the_same_partitions_as_kafka(monkeypatch):
    monkeypatch.setattr("engine.partitioner.CACHED_KEYS", 50)
    hashes = KeyHashes()
    keys = [f"key-{i}".encode() for i in range(120)]
    for count in (1, 3, 4, 12):
        for key in keys * 2:  # past the bound, and again from the cache
            assert hashes.partition(key, count) == partition_for(key, count)
    assert len(hashes._hashes) <= 50


@dataclass
class Payment:
    customer: str
    amount: float


def test_json_codec_round_trips_dataclasses_and_names_bad_fields():
    codec = codec_for(Payment)
    data = codec.encode(Payment("ada", 12.5))
    assert codec.decode(data) == Payment("ada", 12.5)
    with pytest.raises(DecodeError, match=r"no field\(s\) \['country'\]"):
        codec.decode(b'{"customer": "ada", "amount": 1, "country": "FR"}')
    with pytest.raises(DecodeError, match="cannot build Payment"):
        codec.decode(b'{"customer": "ada"}')
    with pytest.raises(DecodeError, match="expected a JSON object"):
        codec.decode(b"[1]")


def test_json_encodings_own_only_their_bytes():
    """Encoded values are kept (memory stores, pending changelogs, key caches): each must hold its own length,
    not the serializer's whole buffer (orjson's is 4 KB, which made a 100k-key memory table take 459 MB)."""
    codec = codec_for(dict)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [codec.encode({"id": i}) for i in range(2_000)] + [dumps([i]) for i in range(2_000)]
        per_value = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert kept[7] == b'{"id":7}'
    assert kept[2_007] == b"[7]"
    assert per_value < 100, f"each encoded value holds {per_value:.0f} bytes"


def test_json_codec_checks_plain_types():
    assert codec_for(int).decode(b"3") == 3
    assert codec_for(float).decode(b"3") == 3.0
    with pytest.raises(DecodeError, match="expected int, got str"):
        codec_for(int).decode(b'"3"')
    with pytest.raises(DecodeError, match="expected int, got bool"):
        codec_for(int).decode(b"true")
    with pytest.raises(DecodeError, match="not valid JSON"):
        codec_for(None).decode(b"{nope")
    assert codec_for(None).decode(None) is None


def test_a_batch_of_plain_json_values_decodes_as_each_would_alone():
    """(decode_many checks a batch of numbers, strings or lists in one pass; what needs a conversion or
    fails goes one at a time, with the same result and error as decode.)"""
    assert codec_for(int).decode_many([b"1", None, b"22"]) == [1, None, 22]
    floats = codec_for(float).decode_many([b"2.5", b"3"])
    assert floats == [2.5, 3.0]
    assert [type(f) for f in floats] == [float, float]
    assert codec_for(tuple).decode_many([b"[1, 2]"]) == [(1, 2)]
    assert codec_for(list).decode_many([b"[1, 2]", b"[]"]) == [[1, 2], []]
    with pytest.raises(DecodeError, match="expected int, got bool"):
        codec_for(int).decode_many([b"1", b"true"])
    with pytest.raises(DecodeError, match="not valid JSON"):
        codec_for(list).decode_many([b"[1]", b"{nope"])


def test_str_and_raw_codecs():
    assert codec_for(str).encode("héllo") == "héllo".encode()
    assert codec_for(str).decode("héllo".encode()) == "héllo"
    with pytest.raises(DecodeError, match="UTF-8"):
        codec_for(str).decode(b"\xff")
    with pytest.raises(EncodeError, match="takes str"):
        codec_for(str).encode(3)
    assert codec_for(bytes).decode(b"\x00") == b"\x00"
    with pytest.raises(EncodeError, match="takes bytes"):
        codec_for(bytes).encode("x")
    with pytest.raises(ConfigError, match="unknown serializer 'xml'"):
        codec_for(None, "xml")
    with pytest.raises(EncodeError, match="cannot encode object"):
        codec_for(None).encode(object())


def test_typed_text_is_decoded_by_the_codec_and_a_bare_word_is_a_string_where_one_fits():
    """How `engine send` and the table queries read a key or value typed by a person (decode_text)."""
    assert decode_text(codec_for(None), '{"n": 1}', None) == {"n": 1}
    assert decode_text(codec_for(None), "1", None) == 1
    assert decode_text(codec_for(None), "ada", None) == "ada"
    assert decode_text(codec_for(None, "json"), "ada", str) == "ada"
    assert decode_text(codec_for(None, "json"), '"ada"', str) == "ada"
    with pytest.raises(DecodeError):
        decode_text(codec_for(int), "ada", int)
    assert decode_text(codec_for(str), "1", str) == "1"
    assert decode_text(codec_for(bytes), "ada", bytes) == b"ada"


def test_settings_precedence_and_coercion():
    env = {"ENGINE_COMMIT_INTERVAL": "0.25", "ENGINE_BROKER": "memory://env"}
    s = load_settings("app", {"broker": "kafka://a:1", "commit_interval": 5}, None, env)
    assert s.broker == "memory://env"
    assert s.commit_interval == timedelta(seconds=0.25)
    s = load_settings("app", {}, {"broker": "kafka://b:2,c:3", "data_dir": "/tmp/x"}, env)
    assert s.bootstrap_servers == ["b:2", "c:3"]
    assert str(s.data_dir) == "/tmp/x"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"broker": "http://x:1"}, "setting 'broker' is 'http://x:1'; unknown scheme 'http'"),
        ({"broker": "kafka://nohost"}, "'nohost' is not host:port"),
        ({"commit_interval": 0}, "setting 'commit_interval' is 0s; expected a positive duration"),
        ({"commit_interval": "soon"}, "setting 'commit_interval' is 'soon'; expected a number"),
        ({"mailbox_size": 0}, "setting 'mailbox_size' is 0; expected an integer of at least 1"),
        ({"agent_error_policy": "retry"}, "setting 'agent_error_policy' is 'retry'"),
        ({"comit_interval": 1}, "unknown setting 'comit_interval' (App argument): did you mean "
                                "commit_interval?"),
        ({"frobnicate": 1}, "unknown setting 'frobnicate' (App argument); known: acceptable_recovery_lag, "),
    ],
)
def test_bad_settings_name_the_setting(given, message):
    with pytest.raises(ConfigError) as info:
        load_settings("app", given, None, {})
    assert message in str(info.value)


def test_bad_env_setting_fails_naming_it():
    with pytest.raises(ConfigError, match="ENGINE_TOPIC_PARTITIONS=four: expected an integer"):
        load_settings("app", {}, None, {"ENGINE_TOPIC_PARTITIONS": "four"})


def test_a_misspelled_env_setting_is_refused_like_a_misspelled_argument():
    expected = (r"unknown setting 'ENGINE_COMIT_INTERVAL' \(environment variable\): did you mean "
                "ENGINE_COMMIT_INTERVAL\\?$")
    with pytest.raises(ConfigError, match=expected):
        load_settings("app", {}, None, {"ENGINE_COMIT_INTERVAL": "1"})
    expected = r"unknown setting 'ENGINE_FROBNICATE' \(environment variable\); known: ENGINE_ACCEPTABLE_"
    with pytest.raises(ConfigError, match=expected):
        load_settings("app", {}, None, {"ENGINE_FROBNICATE": "1"})
    with pytest.raises(ConfigError, match="broker_options can only be given to App"):
        load_settings("app", {}, None, {"ENGINE_BROKER_OPTIONS": "{}"})
    # engine's own tools' variables share the prefix and are not settings; other variables are not looked at
    load_settings("app", {}, None, {"ENGINE_TEST_KAFKA": "127.0.0.1:9092", "PATH": "/bin"})


def test_bad_app_id():
    with pytest.raises(ConfigError, match="setting 'app_id' is 'my app'"):
        load_settings("my app", {}, None, {})


def test_a_record_shared_by_several_agents_is_done_when_all_acked():
    tracker = OffsetTracker()
    tracker.track(0, shares=2)
    tracker.track(1)
    tracker.ack(0)
    tracker.ack(1)
    assert tracker.committable() is None, "one of the two agents still holds offset 0"
    tracker.ack(0)
    assert tracker.committable() == 2


def test_stream_time_counts_a_batch_only_once_every_record_of_it_is_processed():
    from engine.events import TP
    from engine.tasks.leases import Lease

    lease = Lease(TP("t", 0), 1)
    for offset in range(6):
        lease.track(offset)
    lease.observe(2, 500)   # records 0-2, largest event time 500
    lease.observe(5, 300)   # records 3-5: out of order, stream time never goes back
    assert lease.processed_time() is None
    lease.ack(0)
    lease.ack(2)  # 1 is not done yet: the batch is not processed to its end
    assert lease.processed_time() is None
    lease.ack(1)
    assert lease.processed_time() == 500
    for offset in (3, 4, 5):
        lease.ack(offset)
    assert lease.processed_time() == 500


def test_producer_linger_may_be_zero_but_not_negative():
    assert load_settings("a", {"producer_linger": 0}).producer_linger == timedelta(0)
    assert load_settings("a", {}, environ={"ENGINE_PRODUCER_LINGER": "0.02"}).producer_linger == timedelta(
        milliseconds=20)
    with pytest.raises(ConfigError, match=r"setting 'producer_linger' is -0\.001s; expected at least 0"):
        load_settings("a", {"producer_linger": -0.001})


def test_store_memory_is_a_positive_number_of_bytes():
    assert load_settings("a", {}, environ={"ENGINE_STORE_MEMORY": "1048576"}).store_memory == 1 << 20
    with pytest.raises(ConfigError, match="'store_memory'"):
        load_settings("a", {"store_memory": 0}, environ={})


def test_an_events_headers_are_a_tuple_whatever_sequence_its_record_holds():
    from engine.events import TP, Event

    class Parsed:  # as aiokafka's batch parser makes a record: headers in a list
        offset, timestamp, key, value, headers = 4, 0, b"k", b"v", [("trace", b"1")]

    event = Event(TP("t", 0), Parsed(), "k", "v", None)  # type: ignore[arg-type]
    assert event.headers == (("trace", b"1"),)
    assert isinstance(event.headers, tuple)  # (`event.headers + (...)` works on every transport)
