"""Repair's pure logic: the plan a run's findings ask for, and how its ranges go into batches."""

from __future__ import annotations

from spark_jobs.offsets import PartitionRange, merged_spans
from spark_jobs.repair import _batches, plan_repair


def test_the_repair_plan_rereads_named_ranges_clears_extra_ones_and_recomputes_named_entities() -> None:
    findings = [
        {"kind": "range", "outcome": "missing", "topic": "t", "partition": 0, "start": 0, "end": 10},
        {"kind": "range", "outcome": "missing", "topic": "t", "partition": 0, "start": 10, "end": 20},
        {"kind": "range", "outcome": "extra", "topic": "t", "partition": 1, "start": 5, "end": 9},
        {"kind": "range", "outcome": "expired", "topic": "t", "partition": 2, "start": 0, "end": 9},
        {"kind": "gap", "topic": "t", "partition": 2, "start": 50, "end": 60},
        {"kind": "sessions_events", "entity_count": 2, "session_count": 3, "sessions": {"a": ["1"], "b": ["2", "3"]}},
    ]
    plan = plan_repair("r1", findings)
    assert plan.reread == [PartitionRange("t", 0, 0, 20), PartitionRange("t", 1, 5, 9), PartitionRange("t", 2, 50, 60)]
    assert plan.clear == [PartitionRange("t", 1, 5, 9)]
    assert plan.expired == [PartitionRange("t", 2, 0, 9)]
    assert plan.entities == ["a", "b"]
    truncated = {"kind": "sessions_sinks", "entity_count": 20_000, "session_count": 20_000, "sessions": {"a": ["1"]}}
    assert plan_repair("r2", [truncated]).entities is None  # more than were named: recompute all
    assert plan_repair("r3", [{"kind": "sessions_totals"}]).entities is None


def test_a_repair_batch_holds_at_most_one_range_per_partition() -> None:
    ranges = [PartitionRange("t", 0, 0, 5), PartitionRange("t", 0, 9, 12), PartitionRange("t", 1, 3, 4)]
    assert _batches(ranges) == [[ranges[0], ranges[2]], [ranges[1]]]
    assert merged_spans([PartitionRange("t", 0, 5, 9), PartitionRange("t", 0, 0, 5), PartitionRange("t", 1, 0, 1)]) == [
        PartitionRange("t", 0, 0, 9),
        PartitionRange("t", 1, 0, 1),
    ]
