"""Reconciliation: does every committed Kafka record in a processed range sit in exactly one sink?

Pure logic, no I/O: :class:`~tidemark_airflow.operators.ReconcileOperator` feeds it what the sinks
hold (recorded by ``spark_jobs/reconcile.py``), Kafka's committed-record counts (counted by
reading) and the ledger, and turns the answer into a report that names partitions and offsets.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

SCHEDULED_PREFIX = "ingest:"  # scheduled pipelines tile their partitions batch after batch


@dataclass(frozen=True)
class RangeCheck:
    """One ledger range: what Kafka holds in it and what the sinks hold."""

    pipeline: str
    batch_id: int
    topic: str
    partition: int
    start: int
    end: int
    sink_records: int
    kafka_records: int

    @property
    def matches(self) -> bool:
        return self.sink_records == self.kafka_records

    def describe(self) -> str:
        difference = self.kafka_records - self.sink_records
        what = f"{difference:,} missing" if difference > 0 else f"{-difference:,} extra"
        return (
            f"topic {self.topic} partition {self.partition} offsets [{self.start}, {self.end}) "
            f"({self.pipeline} batch {self.batch_id}): Kafka has {self.kafka_records:,} committed records, "
            f"the sinks hold {self.sink_records:,} (events + duplicates + quarantine): {what}"
        )


@dataclass(frozen=True)
class LedgerEntry:
    pipeline: str
    batch_id: int
    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class Gap:
    """Offsets between two consecutive batches of a scheduled pipeline that no ledger range covers."""

    pipeline: str
    topic: str
    partition: int
    start: int
    end: int
    after_batch: int
    before_batch: int

    def describe(self) -> str:
        return (
            f"gap: topic {self.topic} partition {self.partition} offsets [{self.start}, {self.end}) lie between "
            f"{self.pipeline} batches {self.after_batch} and {self.before_batch} and are in no ledger range"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "pipeline": self.pipeline,
            "topic": self.topic,
            "partition": self.partition,
            "start": self.start,
            "end": self.end,
            "after_batch": self.after_batch,
            "before_batch": self.before_batch,
        }


def find_gaps(entries: Iterable[LedgerEntry]) -> list[Gap]:
    """Gaps between consecutive batches of each scheduled pipeline, per partition.

    A gap that some other ledger range (a backfill, say) covers completely is not reported: those
    records were processed.
    """
    entries = list(entries)
    by_partition: dict[tuple[str, str, int], list[LedgerEntry]] = defaultdict(list)
    covering: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for e in entries:
        covering[(e.topic, e.partition)].append((e.start, e.end))
        if e.pipeline.startswith(SCHEDULED_PREFIX):
            by_partition[(e.pipeline, e.topic, e.partition)].append(e)
    gaps = []
    for (pipeline, topic, partition), batches in sorted(by_partition.items()):
        batches.sort(key=lambda e: e.batch_id)
        for previous, current in zip(batches, batches[1:], strict=False):
            if current.start > previous.end and not _covered(
                previous.end, current.start, covering[(topic, partition)]
            ):
                gaps.append(
                    Gap(pipeline, topic, partition, previous.end, current.start, previous.batch_id, current.batch_id)
                )
    return gaps


def _covered(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    """Whether the union of ``spans`` covers [start, end)."""
    position = start
    for span_start, span_end in sorted(spans):
        if span_start > position:
            break
        position = max(position, span_end)
        if position >= end:
            return True
    return position >= end


@dataclass(frozen=True)
class SessionsSummary:
    count: int
    checksum: int


@dataclass(frozen=True)
class Report:
    run_id: str
    checks: list[RangeCheck]
    gaps: list[Gap]
    delta_sessions: SessionsSummary
    postgres_sessions: SessionsSummary

    @property
    def mismatched(self) -> list[RangeCheck]:
        return [c for c in self.checks if not c.matches]

    @property
    def sessions_match(self) -> bool:
        return self.delta_sessions == self.postgres_sessions

    @property
    def ok(self) -> bool:
        return not self.mismatched and not self.gaps and self.sessions_match

    def problems(self) -> list[str]:
        lines = [c.describe() for c in self.mismatched]
        lines += [g.describe() for g in self.gaps]
        if not self.sessions_match:
            d, p = self.delta_sessions, self.postgres_sessions
            lines.append(
                f"sessions: Delta has {d.count:,} rows (checksum {d.checksum}), PostgreSQL has {p.count:,} rows "
                f"(checksum {p.checksum})"
            )
        return lines

    def summary(self) -> str:
        head = (
            f"tidemark reconciliation {self.run_id}: {len(self.checks)} ledger ranges checked, "
            f"{len(self.mismatched)} mismatched, {len(self.gaps)} gaps, sessions "
            f"{'match' if self.sessions_match else 'DIFFER'} ({self.delta_sessions.count:,} in Delta)"
        )
        problems = self.problems()
        if not problems:
            return head
        return "\n".join([head, *(f"- {line}" for line in problems), WHAT_TO_DO])


WHAT_TO_DO = (
    "What to do: README, 'Reconciliation alerts'. Missing records or a gap: run the tidemark_backfill DAG "
    "with the offsets above. Extra records or differing sessions: a sink was changed outside tidemark; "
    "backfill the affected range, which rewrites sessions from the events."
)
