"""engine.transport.kafka_streams_group's encoding against Kafka's own message classes (tests/kafka/codec.py,
no broker): every field of every message, null and non-null, decoded by Kafka from engine's bytes, and
decoded by engine from Kafka's bytes, compared with the values the test chose."""

from __future__ import annotations

from engine.transport.kafka_protocol import (
    MemberOffsetCommitRequest,
    OffsetCommitResponse_v9,
    commit_errors,
)
from engine.transport.kafka_streams_describe import (
    Assignment,
    DescribedGroup,
    DescribedMember,
    DescribedSubtopology,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse_v1,
    described_groups,
)
from engine.transport.kafka_streams_group import (
    CopartitionGroup,
    Endpoint,
    EndpointPartitions,
    Heartbeat,
    HeartbeatAnswer,
    Status,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse_v1,
    Subtopology,
    TaskOffset,
    TopicInfo,
    Topology,
    heartbeat_answer,
)
from tests.contract.codec_helpers import OFFSETS, OFFSETS_AS_KAFKA_READS_THEM, encoded, engine_decodes
from tests.kafka.codec import kafka_decodes, kafka_encodes

CHANGELOG_CONFIG = {"cleanup.policy": "compact", "min.insync.replicas": "2"}


def test_a_joining_heartbeat_with_every_field_set_reads_in_kafka_as_it_was_meant():
    heartbeat = Heartbeat(
        group_id="app", member_id="m-1", member_epoch=0, endpoint_information_epoch=3, instance_id="i-1",
        rack_id="rack-a", rebalance_timeout_ms=30_000,
        topology=Topology(7, (
            Subtopology("0", source_topics=("clicks", "views"), source_topic_regex=("logs-.*",),
                        state_changelog_topics=(TopicInfo("app-counts-changelog", 0, 3, CHANGELOG_CONFIG),),
                        repartition_sink_topics=("app-by-user-repartition",),
                        copartition_groups=(CopartitionGroup((0, 1), (0,), ()),)),
            Subtopology("1", repartition_source_topics=(TopicInfo("app-by-user-repartition", 6, -1),),
                        copartition_groups=(CopartitionGroup(repartition_source_topics=(0,)),)),
        )),
        active_tasks={"1": [2, 0], "0": [5]}, standby_tasks={"0": [1]}, warmup_tasks={},
        process_id="p-1", user_endpoint=Endpoint("host.example", 65535),
        client_tags={"zone": "z1", "az": "a"},
        task_offsets=[TaskOffset("0", 1, 2**40)], task_end_offsets=[TaskOffset("0", 1, 2**41)],
        shutdown_application=True,
    )
    body = encoded(StreamsGroupHeartbeatRequest(heartbeat))
    assert kafka_decodes("StreamsGroupHeartbeatRequest", 1, body) == {
        "groupId": "app", "memberId": "m-1", "memberEpoch": 0, "endpointInformationEpoch": 3,
        "instanceId": "i-1", "rackId": "rack-a", "rebalanceTimeoutMs": 30000,
        "topology": {"epoch": 7, "subtopologies": [
            {"subtopologyId": "0", "sourceTopics": ["clicks", "views"], "sourceTopicRegex": ["logs-.*"],
             "stateChangelogTopics": [{"name": "app-counts-changelog", "partitions": 0,
                                       "replicationFactor": 3,
                                       "topicConfigs": [{"key": "cleanup.policy", "value": "compact"},
                                                        {"key": "min.insync.replicas", "value": "2"}]}],
             "repartitionSinkTopics": ["app-by-user-repartition"], "repartitionSourceTopics": [],
             "copartitionGroups": [{"sourceTopics": [0, 1], "sourceTopicRegex": [0],
                                    "repartitionSourceTopics": []}]},
            {"subtopologyId": "1", "sourceTopics": [], "sourceTopicRegex": [], "stateChangelogTopics": [],
             "repartitionSinkTopics": [],
             "repartitionSourceTopics": [{"name": "app-by-user-repartition", "partitions": 6,
                                          "replicationFactor": -1, "topicConfigs": []}],
             "copartitionGroups": [{"sourceTopics": [], "sourceTopicRegex": [],
                                    "repartitionSourceTopics": [0]}]},
        ]},
        "activeTasks": [{"subtopologyId": "0", "partitions": [5]},
                        {"subtopologyId": "1", "partitions": [0, 2]}],
        "standbyTasks": [{"subtopologyId": "0", "partitions": [1]}], "warmupTasks": [],
        "processId": "p-1", "userEndpoint": {"host": "host.example", "port": 65535},
        "clientTags": [{"key": "az", "value": "a"}, {"key": "zone", "value": "z1"}],
        "taskOffsets": [{"subtopologyId": "0", "partition": 1, "offset": 2**40}],
        "taskEndOffsets": [{"subtopologyId": "0", "partition": 1, "offset": 2**41}],
        "shutdownApplication": True,
    }


def test_a_steady_heartbeat_sends_null_for_everything_unchanged():
    heartbeat = Heartbeat(group_id="app", member_id="m-1", member_epoch=12)
    body = encoded(StreamsGroupHeartbeatRequest(heartbeat))
    assert kafka_decodes("StreamsGroupHeartbeatRequest", 1, body) == {
        "groupId": "app", "memberId": "m-1", "memberEpoch": 12, "endpointInformationEpoch": 0,
        "instanceId": None, "rackId": None, "rebalanceTimeoutMs": -1, "topology": None, "activeTasks": None,
        "standbyTasks": None, "warmupTasks": None, "processId": None, "userEndpoint": None,
        "clientTags": None,
        "taskOffsets": None, "taskEndOffsets": None, "shutdownApplication": False,
    }


def test_a_heartbeat_answer_written_by_kafka_reads_in_engine_field_by_field():
    body = kafka_encodes("StreamsGroupHeartbeatResponse", 1, {
        "throttleTimeMs": 5, "errorCode": 0, "errorMessage": None, "memberId": "m-1", "memberEpoch": 9,
        "heartbeatIntervalMs": 5000, "taskOffsetIntervalMs": 60000, "acceptableRecoveryLag": 2**35,
        "status": [{"statusCode": 3, "statusDetail": "creating app-counts-changelog"},
                   {"statusCode": 6, "statusDetail": "zone"}],
        "activeTasks": [{"subtopologyId": "0", "partitions": [0, 3]}], "standbyTasks": [],
        "warmupTasks": [{"subtopologyId": "1", "partitions": [2]}],
        "topologyDescriptionRequired": True, "endpointInformationEpoch": 4,
        "partitionsByUserEndpoint": [{
            "userEndpoint": {"host": "10.0.0.1", "port": 8080},
            "activePartitions": [{"topic": "clicks", "partitions": [0, 3]}],
            "standbyPartitions": [{"topic": "app-by-user-repartition", "partitions": [2]}]}],
    })
    assert heartbeat_answer(engine_decodes(StreamsGroupHeartbeatResponse_v1, body)) == HeartbeatAnswer(
        error_code=0, error_message=None, member_id="m-1", member_epoch=9, heartbeat_interval_ms=5000,
        task_offset_interval_ms=60000, acceptable_recovery_lag=2**35,
        statuses=(Status(3, "creating app-counts-changelog"), Status(6, "zone")),
        active_tasks={"0": [0, 3]}, standby_tasks={}, warmup_tasks={"1": [2]},
        topology_description_required=True, endpoint_information_epoch=4,
        partitions_by_user_endpoint=(EndpointPartitions(Endpoint("10.0.0.1", 8080), {"clicks": [0, 3]},
                                                        {"app-by-user-repartition": [2]}),),
    )
    unchanged = kafka_encodes("StreamsGroupHeartbeatResponse", 1, {
        "throttleTimeMs": 0, "errorCode": 25, "errorMessage": "unknown member", "memberId": "",
        "memberEpoch": 0,
        "heartbeatIntervalMs": 0, "taskOffsetIntervalMs": 0, "acceptableRecoveryLag": -1, "status": None,
        "activeTasks": None, "standbyTasks": None, "warmupTasks": None, "topologyDescriptionRequired": False,
        "endpointInformationEpoch": 0, "partitionsByUserEndpoint": None})
    answer = heartbeat_answer(engine_decodes(StreamsGroupHeartbeatResponse_v1, unchanged))
    assert (answer.error_code, answer.error_message, answer.statuses) == (25, "unknown member", ())
    assert (answer.active_tasks, answer.standby_tasks, answer.warmup_tasks) == (None, None, None)
    assert answer.partitions_by_user_endpoint is None


def test_a_describe_request_and_answer_match_kafkas():
    request = encoded(StreamsGroupDescribeRequest(["a", "b"]))
    assert kafka_decodes("StreamsGroupDescribeRequest", 1, request) == {
        "groupIds": ["a", "b"], "includeAuthorizedOperations": False, "includeTopologyDescription": False}
    node = {"name": "KSTREAM-SOURCE-0", "nodeType": 1, "sourceTopics": ["clicks"], "sinkTopic": None,
            "stores": [], "successors": ["KSTREAM-AGG-1"]}
    tasks = [{"subtopologyId": "0", "partitions": [1]}]
    body = kafka_encodes("StreamsGroupDescribeResponse", 1, {"throttleTimeMs": 0, "groups": [
        {"errorCode": 0, "errorMessage": None, "groupId": "app", "groupState": "Stable", "groupEpoch": 4,
         "assignmentEpoch": 4,
         "topology": {"epoch": 1, "subtopologies": [{
             "subtopologyId": "0", "sourceTopics": ["clicks"], "repartitionSinkTopics": ["app-r-repartition"],
             "stateChangelogTopics": [{"name": "app-c-changelog", "partitions": 4, "replicationFactor": 1,
                                       "topicConfigs": [{"key": "cleanup.policy", "value": "compact"}]}],
             "repartitionSourceTopics": []}]},
         "members": [{
             "memberId": "m-1", "memberEpoch": 4, "instanceId": None, "rackId": "r", "clientId": "c",
             "clientHost": "/127.0.0.1", "topologyEpoch": 1, "processId": "p", "userEndpoint": None,
             "clientTags": [{"key": "zone", "value": "z"}],
             "taskOffsets": [{"subtopologyId": "0", "partition": 1, "offset": 10}], "taskEndOffsets": [],
             "assignment": {"activeTasks": tasks, "standbyTasks": [], "warmupTasks": []},
             "targetAssignment": {"activeTasks": [], "standbyTasks": tasks, "warmupTasks": []},
             "isClassic": False}],
         "authorizedOperations": -2147483648,
         "topologyDescription": {"subtopologies": [{"subtopologyId": "0", "nodes": [node]}],
                                 "globalStores": [{"source": node, "processor": {**node, "nodeType": 2}}]},
         "topologyDescriptionStatus": 3, "assignorName": "sticky"},
        {"errorCode": 69, "errorMessage": "Group b is not a streams group.", "groupId": "b", "groupState": "",
         "groupEpoch": 0, "assignmentEpoch": 0, "topology": None, "members": [],
         "authorizedOperations": -2147483648, "topologyDescription": None, "topologyDescriptionStatus": 0,
         "assignorName": None},
    ]})
    assert described_groups(engine_decodes(StreamsGroupDescribeResponse_v1, body)) == [
        DescribedGroup(
            0, None, "app", "Stable", 4, 4, 1,
            (DescribedSubtopology("0", ("clicks",), ("app-r-repartition",),
                                  (TopicInfo("app-c-changelog", 4, 1, {"cleanup.policy": "compact"}),), ()),),
            (DescribedMember("m-1", 4, None, "r", "c", "/127.0.0.1", 1, "p", None, {"zone": "z"},
                             (TaskOffset("0", 1, 10),), (), Assignment({"0": [1]}, {}, {}),
                             Assignment({}, {"0": [1]}, {}), False),),
            "sticky"),
        DescribedGroup(69, "Group b is not a streams group.", "b", "", 0, 0, None, None, (), None),
    ]


def test_a_members_offset_commit_matches_kafkas():
    request = MemberOffsetCommitRequest("app", "m-1", 9, OFFSETS)
    assert kafka_decodes("OffsetCommitRequest", 9, encoded(request)) == {
        "groupId": "app", "generationIdOrMemberEpoch": 9, "memberId": "m-1", "groupInstanceId": None,
        "topics": OFFSETS_AS_KAFKA_READS_THEM}
    body = kafka_encodes("OffsetCommitResponse", 9, {"throttleTimeMs": 0, "topics": [
        {"name": "a", "partitions": [{"partitionIndex": 1, "errorCode": 0},
                                     {"partitionIndex": 2, "errorCode": 113}]}]})
    assert commit_errors(engine_decodes(OffsetCommitResponse_v9, body)) == {("a", 1): 0, ("a", 2): 113}
