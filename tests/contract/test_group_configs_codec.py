"""engine.transport.kafka_group_configs' IncrementalAlterConfigs v1 against Kafka's own message classes
(tests/kafka/codec.py, no broker)."""

from __future__ import annotations

from engine.transport.kafka_group_configs import (
    GroupConfigsRequest,
    IncrementalAlterConfigsResponse_v1,
    alter_errors,
)
from tests.contract.codec_helpers import encoded, engine_decodes
from tests.kafka.codec import kafka_decodes, kafka_encodes


def test_a_groups_configs_set_and_deleted_read_in_kafka_as_they_were_meant():
    request = GroupConfigsRequest("app", {"streams.num.standby.replicas": "1",
                                          "streams.session.timeout.ms": None})
    assert kafka_decodes("IncrementalAlterConfigsRequest", 1, encoded(request)) == {
        "resources": [{"resourceType": 32, "resourceName": "app", "configs": [
            {"name": "streams.num.standby.replicas", "configOperation": 0, "value": "1"},
            {"name": "streams.session.timeout.ms", "configOperation": 1, "value": None}]}],
        "validateOnly": False}


def test_an_answer_written_by_kafka_reads_in_engine():
    body = kafka_encodes("IncrementalAlterConfigsResponse", 1, {"throttleTimeMs": 0, "responses": [
        {"errorCode": 40, "errorMessage": "too many standbys", "resourceType": 32, "resourceName": "app"},
        {"errorCode": 0, "errorMessage": None, "resourceType": 32, "resourceName": "other"}]})
    assert alter_errors(engine_decodes(IncrementalAlterConfigsResponse_v1, body)) == [
        (40, "too many standbys"), (0, None)]
