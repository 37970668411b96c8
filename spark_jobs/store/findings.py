"""What a reconcile run found, as values: range checks, gaps, lag, session differences, and their stored form.

Pure logic, no I/O. Each finding names its problem by partition and offsets, or by entity and session id,
and stores as a JSON object (``reconcile_runs.findings``, ``findings.finding``); :func:`describe` gives one
line for a stored one, :func:`finding_key` what it is about in every run that finds it. A run's findings
make its :class:`~spark_jobs.store.report.Report`; :mod:`spark_jobs.repair` reads the stored findings back
to repair exactly what they name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from spark_jobs.store.retention import Loss

SCHEDULED_PREFIX = "ingest:"  # scheduled pipelines tile their partitions batch after batch
SHOWN = 10  # names listed per finding in a report; the stored finding keeps up to STORED
STORED = 10_000

# Why a range is checked: never verified, a commit touched its rows, or its turn in the rotation.
NEW, CHANGED, ROTATION, MOVED = "new", "changed", "rotation", "moved"


@dataclass(frozen=True)
class RangeCheck:
    """One ledger range and what the sinks hold in it, against Kafka (new) or against its verification.

    A range never verified is compared with the committed records Kafka holds (``kafka_records``;
    None when retention removed its start: ``expired``). A verified range is compared with the
    count and checksum it was verified with. Either way each offset must be held once at most
    (``sink_offsets``, the distinct offsets held, equal to ``sink_records``): a record held twice
    where another is missing leaves the count right.
    """

    pipeline: str
    batch_id: int
    topic: str
    partition: int
    start: int
    end: int
    sink_records: int
    sink_checksum: int = 0
    reason: str = NEW
    kafka_records: int | None = None
    low_watermark: int | None = None
    verified_records: int | None = None
    verified_checksum: int | None = None
    sink_offsets: int | None = None  # distinct offsets held (None: not counted)

    @property
    def held_twice(self) -> int:
        """Rows beyond one per offset: records a sink table holds more than once."""
        return 0 if self.sink_offsets is None else self.sink_records - self.sink_offsets

    @property
    def outcome(self) -> str:
        """``ok``, ``missing``, ``extra`` (more rows than expected, or an offset held twice),
        ``changed`` (same count, other rows) or ``expired``."""
        if self.expected is None:
            return "expired"
        # A range a recorded batch moved rows of is held to its count and offsets: its checksum moved too.
        same = self.reason in (NEW, MOVED) or self.sink_checksum == self.verified_checksum
        if self.held_twice > 0:
            return "extra"
        if self.sink_records < self.expected:
            return "missing"
        if self.sink_records > self.expected:
            return "extra"
        return "ok" if same else "changed"

    @property
    def matches(self) -> bool:
        return self.outcome == "ok"

    @property
    def baseline(self) -> bool:
        """Whether what the sinks hold becomes the range's verified count and checksum: a range that
        matches, or one retention expired before its first check that holds each offset once (there
        is nothing to count it against, but a change after this is a change)."""
        return self.matches or (self.outcome == "expired" and self.held_twice == 0)

    @property
    def where(self) -> str:
        return f"topic {self.topic} partition {self.partition} offsets [{self.start}, {self.end})"

    def describe(self) -> str:
        source = f"({self.pipeline} batch {self.batch_id})"
        outcome, rows = self.outcome, self.expected
        if rows is None:  # the outcome is "expired"
            return (
                f"expired: {self.where} {source}: Kafka's retention removed offsets [{self.start}, "
                f"{self.low_watermark}) before the range was verified, so there is nothing to count it against; "
                f"the sinks hold {self.sink_records:,} rows of it. Not a mismatch."
            )
        if self.reason == NEW:
            expected = f"Kafka has {self.kafka_records:,} committed records"
        else:
            expected = f"verified with {self.verified_records:,} rows, re-checked ({self.reason})"
        if outcome == "changed":
            what = "same count, other rows (the checksum changed)"
        elif self.held_twice:
            what = f"{self.held_twice:,} rows beyond one per offset"
            # Rows are held twice only where the distinct offsets were counted.
            if self.sink_offsets is not None and self.sink_offsets < rows:
                what += f", {rows - self.sink_offsets:,} offsets held by none"
        else:
            what = f"{abs(self.sink_records - rows):,} {outcome}"
        held = f"the sinks hold {self.sink_records:,} (events + duplicates + quarantine)"
        return f"{self.where} {source}: {expected}, {held}: {what}"

    @property
    def expected(self) -> int | None:
        """What the range should hold: Kafka's committed records (new) or its verified row count."""
        return self.kafka_records if self.reason == NEW else self.verified_records

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": "range",
            "outcome": self.outcome,
            "reason": self.reason,
            "pipeline": self.pipeline,
            "batch_id": self.batch_id,
            "topic": self.topic,
            "partition": self.partition,
            "start": self.start,
            "end": self.end,
            "sink_records": self.sink_records,
            "sink_offsets": self.sink_offsets,
            "expected_records": self.expected,
            "low_watermark": self.low_watermark,
        }


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
            "kind": "gap",
            "pipeline": self.pipeline,
            "topic": self.topic,
            "partition": self.partition,
            "start": self.start,
            "end": self.end,
            "after_batch": self.after_batch,
            "before_batch": self.before_batch,
        }


def find_gaps(entries: Iterable[LedgerEntry], losses: Iterable[Loss] = ()) -> list[Gap]:
    """Gaps between consecutive batches of each scheduled pipeline, per partition.

    A gap that some other ledger range (a backfill or a repair, say) covers completely is not
    reported: those records were processed. Neither is one that acknowledged ``losses`` cover:
    those are reported as what they are.
    """
    entries = list(entries)
    by_partition: dict[tuple[str, str, int], list[LedgerEntry]] = defaultdict(list)
    covering: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for loss in losses:
        covering[(loss.topic, loss.partition)].append((loss.start, loss.end))
    for e in entries:
        covering[(e.topic, e.partition)].append((e.start, e.end))
        if e.pipeline.startswith(SCHEDULED_PREFIX):
            by_partition[(e.pipeline, e.topic, e.partition)].append(e)
    gaps = []
    for (pipeline, topic, partition), batches in sorted(by_partition.items()):
        batches.sort(key=lambda e: e.batch_id)
        for previous, current in zip(batches, batches[1:], strict=False):
            if current.start > previous.end and not _covered(previous.end, current.start, covering[(topic, partition)]):
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
class Lag:
    """How far the sinks are behind Kafka in one partition when the run looked."""

    topic: str
    partition: int
    high_watermark: int
    processed_to: int
    oldest_unprocessed: datetime | None  # arrival time of the first record not processed yet
    behind_seconds: float

    @property
    def behind_records(self) -> int:
        return max(0, self.high_watermark - self.processed_to)

    def describe(self) -> str:
        return (
            f"lag: topic {self.topic} partition {self.partition}: {self.behind_records:,} offsets "
            f"[{self.processed_to}, {self.high_watermark}) not processed yet, the oldest arrived "
            f"{self.behind_seconds / 60:,.0f} min ago. Is tidemark_ingest running (unpaused, not failing)?"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": "lag",
            "topic": self.topic,
            "partition": self.partition,
            "start": self.processed_to,
            "end": self.high_watermark,
            "behind_seconds": self.behind_seconds,
        }


def lag_summary(lags: list[Lag]) -> str:
    """How far behind Kafka, in records and in the age of the oldest record waiting."""
    behind = sum(lag.behind_records for lag in lags)
    if not behind:
        return "caught up with Kafka"
    oldest = max(lag.behind_seconds for lag in lags) / 60
    age = f"{oldest:,.0f} min" if oldest >= 1 else "under a minute"
    return f"behind Kafka by {behind:,} records (the oldest waiting {age})"


@dataclass(frozen=True)
class SessionsSummary:
    count: int
    checksum: int


@dataclass(frozen=True)
class SessionDifference:
    """Sessions that differ, named: between Delta and PostgreSQL, or between Delta and a recompute from events.

    ``sessions`` maps each entity to its differing session ids (up to :data:`STORED` entities are
    kept; ``entity_count`` / ``session_count`` are the full numbers).
    """

    kind: str  # "sinks" (Delta vs PostgreSQL) or "events" (Delta vs a recompute from events)
    sessions: dict[str, tuple[str, ...]]
    entity_count: int
    session_count: int

    @classmethod
    def of(cls, kind: str, pairs: Iterable[tuple[str, str]]) -> SessionDifference:
        """From (entity_id, session_id) pairs."""
        by_entity: dict[str, set[str]] = defaultdict(set)
        for entity, session in pairs:
            by_entity[entity].add(session)
        sessions = {e: tuple(sorted(by_entity[e])) for e in sorted(by_entity)[:STORED]}
        return cls(kind, sessions, len(by_entity), sum(len(s) for s in by_entity.values()))

    @property
    def entities(self) -> list[str]:
        return list(self.sessions)

    def describe(self) -> str:
        what = (
            "Delta and PostgreSQL differ in"
            if self.kind == "sinks"
            else "Delta holds other values than a recompute from events for"
        )
        shown = "; ".join(
            f"entity {entity!r}: {', '.join(ids[:3])}{' …' if len(ids) > 3 else ''}"
            for entity, ids in list(self.sessions.items())[:SHOWN]
        )
        more = f"; and {self.entity_count - SHOWN:,} more entities" if self.entity_count > SHOWN else ""
        return f"sessions: {what} {self.session_count:,} sessions of {self.entity_count:,} entities: {shown}{more}"

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": f"sessions_{self.kind}",
            "entity_count": self.entity_count,
            "session_count": self.session_count,
            "sessions": {e: list(ids) for e, ids in self.sessions.items()},
        }


RANGE, GAP, SINKS, EVENTS = "range", "gap", "sessions_sinks", "sessions_events"


def kind_of(finding: dict) -> str:
    """The kind a finding is kept as: Delta vs PostgreSQL totals and named sessions are one."""
    return SINKS if finding["kind"] == "sessions_totals" else finding["kind"]


def finding_key(finding: dict) -> str | None:
    """What ``finding`` is about, the same in every run that finds it; None for what is not kept
    open (lag, retention losses, and a range that expired before its first check)."""
    kind = kind_of(finding)
    if kind == RANGE:
        if finding["outcome"] in ("ok", "expired"):
            return None
        return f"range {finding['pipeline']} {finding['batch_id']} {finding['topic']} {finding['partition']}"
    if kind == GAP:
        f = finding
        return f"gap {f['pipeline']} {f['topic']} {f['partition']} {f['start']} {f['end']}"
    if kind in (SINKS, EVENTS):
        return kind
    return None


def describe(finding: dict) -> str:
    """One line for a stored finding."""
    kind = kind_of(finding)
    if kind == RANGE:
        f = finding
        where = f"topic {f['topic']} partition {f['partition']} offsets [{f['start']}, {f['end']})"
        return f"{f['outcome']}: {where} ({f['pipeline']} batch {f['batch_id']})"
    if kind == GAP:
        return (
            f"gap: topic {finding['topic']} partition {finding['partition']} offsets [{finding['start']}, "
            f"{finding['end']}) in no ledger range"
        )
    if finding["kind"] == "sessions_totals":
        return f"sessions: Delta has {finding['delta']:,} rows, PostgreSQL has {finding['postgres']:,}"
    what = "Delta and PostgreSQL differ in" if kind == SINKS else "Delta differs from a recompute from events in"
    return f"sessions: {what} {finding['session_count']:,} sessions of {finding['entity_count']:,} entities"


def describe_open(finding: dict) -> str:
    """One line for a finding a run carried over (:meth:`OpenFinding.carried`)."""
    return f"#{finding['finding_id']} (open since run {finding['open_since']}): {describe(finding)}"


def range_key(finding: dict) -> tuple[str, int, str, int]:
    """The ledger range a range finding names, as :func:`spark_jobs.reconcile.ranges.key`."""
    return (finding["pipeline"], finding["batch_id"], finding["topic"], finding["partition"])
