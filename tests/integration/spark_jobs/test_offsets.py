"""The broker's offsets as the planner reads them, against the real Kafka: a topic is readable the moment
it is created, however long the broker takes to name it and its partitions take to get a leader."""

from __future__ import annotations

import time
import uuid

import pytest

from spark_jobs import offsets
from spark_jobs.errors import TopicError
from spark_jobs.settings import Settings

pytestmark = pytest.mark.integration


def test_a_topic_just_created_gives_its_offsets_at_once(stack: Settings) -> None:
    """Right after the broker accepts a new topic its metadata may not name it yet ("does not exist") and
    its partitions may have no leader ("Not leader for partition"): a run planned then, or a `tidemark
    produce` that created the topic, waits for both."""
    from confluent_kafka.admin import NewTopic

    admin = offsets.admin_client(stack)
    for _ in range(8):
        created, raw = (f"test-{uuid.uuid4().hex[:10]}" for _ in range(2))
        assert offsets.ensure_topic(stack, created, partitions=2)
        assert offsets.watermarks(stack, created) == {0: (0, 0), 1: (0, 0)}
        # Created by someone else (another tool, an operator): the planner itself waits for the leaders.
        admin.create_topics([NewTopic(raw, 3, 1)])[raw].result(timeout=30)
        assert offsets.watermarks(stack, raw) == {0: (0, 0), 1: (0, 0), 2: (0, 0)}


def test_a_topic_that_does_not_exist_is_one_line_once_a_new_topic_would_be_named(stack: Settings) -> None:
    """The wait for a new topic's name is short: a misspelt topic is the one line after it, not after the
    whole timeout."""
    started = time.monotonic()
    with pytest.raises(TopicError, match="does not exist"):
        offsets.watermarks(stack, f"test-missing-{uuid.uuid4().hex[:10]}", timeout_s=10.0)
    assert offsets.NEW_TOPIC_WAIT_S <= time.monotonic() - started < 10.0
