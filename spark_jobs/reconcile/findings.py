"""What a reconcile run found, as values: range checks, gaps, session differences, and the report.

Pure logic, no I/O. :mod:`spark_jobs.reconcile.run` measures (Kafka, Delta, PostgreSQL) and builds a
:class:`Report`; the report names every problem by partition and offsets, or by entity and
session id, stores as JSON (``reconcile_runs.findings``), and tells the operator the repair.
:mod:`spark_jobs.repair` reads the stored findings back to repair exactly what they name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from spark_jobs.reconcile.open_findings import describe_open
from spark_jobs.retention import Loss

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
        outcome = self.outcome
        if outcome == "expired":
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
            if self.sink_offsets < self.expected:
                what += f", {self.expected - self.sink_offsets:,} offsets held by none"
        else:
            what = f"{abs(self.sink_records - self.expected):,} {outcome}"
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


@dataclass(frozen=True)
class Report:
    run_id: str
    checks: list[RangeCheck]
    gaps: list[Gap]
    delta_sessions: SessionsSummary
    postgres_sessions: SessionsSummary
    differences: list[SessionDifference] = field(default_factory=list)
    entities_checked: int = 0
    used_spark: bool = True
    lags: list[Lag] = field(default_factory=list)
    lag_alert_seconds: float = float("inf")
    snapshot_seconds: float = 0.0  # how long the run held the lake lock
    losses: list[Loss] = field(default_factory=list)  # acknowledged: reported, not failed
    # Findings of earlier runs still open that this run did not find itself (it did not check
    # them, or they expired since): each with its "finding_id" and "open_since" run.
    carried: list[dict] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)  # earlier findings this run found fixed, a line each
    opened: int = 0  # findings this run found for the first time

    @property
    def lagging(self) -> list[Lag]:
        return [lag for lag in self.lags if lag.behind_seconds > self.lag_alert_seconds]

    @property
    def mismatched(self) -> list[RangeCheck]:
        return [c for c in self.checks if c.outcome not in ("ok", "expired")]

    @property
    def expired(self) -> list[RangeCheck]:
        return [c for c in self.checks if c.outcome == "expired"]

    @property
    def sessions_match(self) -> bool:
        return self.delta_sessions == self.postgres_sessions and not self.differences

    @property
    def consistent(self) -> bool:
        """No finding that needs a repair, found now or still open from an earlier run (expired
        ranges are reported, not failed)."""
        return not self.mismatched and not self.gaps and self.sessions_match and not self.carried

    @property
    def ok(self) -> bool:
        return self.consistent and not self.lagging

    @property
    def status(self) -> str:
        """``ok``; ``mismatch`` (something to repair); ``lagging`` (consistent, but too far behind Kafka)."""
        if not self.consistent:
            return "mismatch"
        return "lagging" if self.lagging else "ok"

    def findings(self) -> list[dict[str, object]]:
        """Every finding as JSON-ready dicts (what ``reconcile_runs.findings`` stores, and a repair
        of this run repairs): this run's own, and the earlier ones still open."""
        return self.found() + self.carried

    def found(self) -> list[dict[str, object]]:
        """This run's own findings as JSON-ready dicts."""
        found: list[dict[str, object]] = [c.as_dict() for c in self.mismatched + self.expired]
        found += [g.as_dict() for g in self.gaps]
        found += [loss.as_dict() for loss in self.losses]
        found += [d.as_dict() for d in self.differences]
        found += [lag.as_dict() for lag in self.lagging]
        if self.delta_sessions != self.postgres_sessions and not any(d.kind == "sinks" for d in self.differences):
            found.append({"kind": "sessions_totals", **self._totals()})
        return found

    def _totals(self) -> dict[str, int]:
        d, p = self.delta_sessions, self.postgres_sessions
        return {"delta": d.count, "delta_checksum": d.checksum, "postgres": p.count, "postgres_checksum": p.checksum}

    def problems(self) -> list[str]:
        lines = [c.describe() for c in self.mismatched]
        lines += [g.describe() for g in self.gaps]
        lines += [d.describe() for d in self.differences]
        if self.delta_sessions != self.postgres_sessions:
            d, p = self.delta_sessions, self.postgres_sessions
            lines.append(f"sessions: Delta has {d.count:,} rows, PostgreSQL has {p.count:,} (checksums differ)")
        lines += [lag.describe() for lag in self.lagging]
        lines += [f"still open: {describe_open(f)}" for f in self.carried]
        return lines

    def headline(self) -> str:
        new = sum(c.reason == NEW for c in self.checks)
        if not self.checks and not self.used_spark:
            checked = ["nothing new"]
        else:
            checked = [f"{len(self.checks)} ranges checked ({new} new, {len(self.checks) - new} re-checked)"]
        if self.carried:
            n = len(self.carried)
            checked[-1] += f"; {n} open finding{'s' if n > 1 else ''} from earlier runs"
        parts = [
            *checked,
            f"{len(self.mismatched)} mismatched",
            f"{len(self.expired)} expired",
            f"{len(self.gaps)} gaps",
            *([f"{len(self.losses)} lost to retention"] if self.losses else []),
            f"sessions {'match' if self.sessions_match else 'DIFFER'} ({self.delta_sessions.count:,} in Delta, "
            f"{self.entities_checked:,} entities recomputed from events)",
        ]
        if self.lags:
            parts.append(lag_summary(self.lags))
        return f"tidemark reconcile {self.run_id}: {self.status.upper()}: " + ", ".join(parts)

    def summary(self) -> str:
        """The full report: the headline, every problem on its own line, expired ranges, the repair."""
        lines = [self.headline()]
        lines += [f"- {line}" for line in self.problems()]
        lines += [f"- {c.describe()}" for c in self.expired]
        lines += [f"- {loss.describe()}" for loss in self.losses]
        lines += [f"- closed: {line}" for line in self.closed]
        if not self.consistent:
            lines.append(self.repair_hint())
        return "\n".join(lines)

    def alert(self) -> str:
        """The alert: short, what is wrong and where, and the repair (the full report is in the run)."""
        problems = self.problems()
        shown = [f"- {line}" for line in problems[:5]]
        if len(problems) > 5:
            shown.append(f"- and {len(problems) - 5} more (tidemark reconcile --show {self.run_id})")
        hint = [self.repair_hint()] if not self.consistent else []
        return "\n".join([self.headline(), *shown, *hint])

    def repair_hint(self) -> str:
        return (
            f"Repair: `tidemark repair --run-id {self.run_id}`, or trigger the tidemark_repair DAG with "
            f"reconcile_run_id={self.run_id}. It rewrites only what is named above, then re-checks. "
            "What no repair can fix (a range retention removed): `tidemark findings --acknowledge ID --reason TEXT`."
        )
