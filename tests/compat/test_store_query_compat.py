"""The official mqadmin (4.9.7) finds messages in FerryMQ's store: queryMsgByKey (QUERY_MESSAGE
through the IndexFile), queryMsgByUniqueKey (QUERY_MESSAGE with ``_UNIQUE_KEY_QUERY``) and
queryMsgById (VIEW_MESSAGE_BY_ID at the address the offset msgId encodes), for messages the
official Java producer sent."""

from __future__ import annotations

import uuid

import pytest

from testkit.java_client import run_mqadmin

pytestmark = pytest.mark.compat


def test_mqadmin_finds_java_produced_messages_by_key_unique_key_and_offset_msg_id(ferrymq, java_client):
    topic = f"QueryTopic_{uuid.uuid4().hex[:6]}"
    events = java_client.produce(ferrymq.namesrv_addr, topic, count=6, modes=("sync",), key_prefix="qk")
    sent = events.of("sent")
    assert len(sent) == 6, events

    by_key = run_mqadmin(ferrymq.namesrv_addr, "queryMsgByKey", "-t", topic, "-k", sent[2]["key"])
    rows = [line.split() for line in by_key.splitlines() if line.strip() and not line.startswith("#")]
    assert [row[0] for row in rows] == [sent[2]["msgId"]], by_key  # only that message: the client checks keys

    by_offset_id = run_mqadmin(ferrymq.namesrv_addr, "queryMsgById", "-i", sent[3]["offsetMsgId"])
    assert f"OffsetID:            {sent[3]['offsetMsgId']}" in by_offset_id or sent[3]["offsetMsgId"] in by_offset_id
    assert sent[3]["key"] in by_offset_id and topic in by_offset_id, by_offset_id

    by_unique = run_mqadmin(ferrymq.namesrv_addr, "queryMsgByUniqueKey", "-i", sent[4]["msgId"], "-t", topic)
    assert sent[4]["key"] in by_unique and topic in by_unique, by_unique
