import json

import pytest

from spark_jobs.offsets import PartitionRange, spark_offsets


def test_spark_offsets_are_per_topic_per_partition_json() -> None:
    starting, ending = spark_offsets([PartitionRange("events", 0, 5, 10), PartitionRange("events", 2, 0, 7)])
    assert json.loads(starting) == {"events": {"0": 5, "2": 0}}
    assert json.loads(ending) == {"events": {"0": 10, "2": 7}}


def test_range_that_ends_before_it_starts_is_rejected_with_both_offsets() -> None:
    with pytest.raises(ValueError, match="partition 1: end offset 3 is before start offset 9"):
        PartitionRange("events", 1, 9, 3)


def test_negative_offsets_are_rejected() -> None:
    with pytest.raises(ValueError, match="start offset must be >= 0"):
        PartitionRange("events", 0, -1, 3)
