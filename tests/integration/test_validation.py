"""Every kind of malformed record the producer makes is quarantined with its own reason (Spark)."""

from __future__ import annotations

from datetime import UTC, datetime

from spark_jobs.producer import MALFORMED_KINDS, ProduceSpec, generate
from spark_jobs.validation import parse_records


def test_each_malformed_kind_gets_its_reason_and_valid_records_pass(spark) -> None:
    records = list(generate(ProduceSpec(count=1500, entities=20, malformed_rate=0.4, late_rate=0.1, seed=3)))
    arrival = datetime(2026, 3, 1, tzinfo=UTC)
    raw = spark.createDataFrame(
        [("events", 0, offset, arrival, r.key, r.value) for offset, r in enumerate(records)],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )
    reasons = {row["offset"]: row["quarantine_reason"] for row in parse_records(raw).collect()}

    assert len(reasons) == len(records)  # nothing dropped
    seen = set()
    for offset, record in enumerate(records):
        reason = reasons[offset]
        if record.kind.startswith("malformed:"):
            kind = record.kind.split(":", 1)[1]
            seen.add(kind)
            assert reason is not None and reason.startswith(kind), (kind, reason)
        else:
            assert reason is None, (record.kind, reason, record.value[:200])
    assert seen == set(MALFORMED_KINDS), "every malformed kind should occur in the sample"
