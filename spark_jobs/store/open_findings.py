"""Findings stay open until fixed: which earlier findings a run closes, keeps, or carries over.

Pure logic, no I/O (:mod:`spark_jobs.store.history` stores them in the ``findings`` table). A
finding is open from the run that found it until a later check of the same thing finds it fixed,
or an operator acknowledges it. What a run checks decides what it may close:

* a range: a run that checks the range again (every run that uses Spark checks the ranges of open
  findings, and a repair's re-check checks what the repair rewrote) closes it when it matches.
  Expired since, it cannot be checked any more: it stays open until an operator acknowledges it;
* a gap, or sessions that differ between Delta and PostgreSQL: every run looks again (the ledger
  and the two sinks' totals), so a run that no longer finds it closes it;
* sessions that differ from a recompute from events: every run that uses Spark recomputes the
  named entities; one that could not name them all closes only on a repair's re-check (the repair
  recomputed every entity).

A run that checks nothing closes nothing: its findings are the open ones ("nothing new; 1 open
finding"). Lag and retention losses are reported by every run as they are, and not kept open.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from spark_jobs.errors import ConfigError
from spark_jobs.store import retention, verified
from spark_jobs.store.findings import EVENTS, GAP, RANGE, describe_open, finding_key, kind_of, range_key
from spark_jobs.store.report import Report
from spark_jobs.store.retention import Loss


@dataclass(frozen=True)
class OpenFinding:
    """A finding of an earlier run that nothing has closed yet."""

    finding_id: int
    key: str
    finding: dict  # as the latest run that saw it described it (``Report.findings()``)
    opened_by: str
    opened_at: datetime

    @property
    def kind(self) -> str:
        return kind_of(self.finding)

    def describe(self) -> str:
        return describe_open(self.carried())

    def carried(self, finding: dict | None = None) -> dict:
        """The finding as a run that carries it over stores it: with its id and the run that opened it."""
        return {**(finding or self.finding), "finding_id": self.finding_id, "open_since": self.opened_by}


def entities_to_recheck(open_findings: list[OpenFinding]) -> list[str]:
    """The entities of open findings of sessions that differ from events (a run with Spark recomputes them)."""
    return sorted({e for f in open_findings if f.kind == EVENTS for e in f.finding["sessions"]})


@dataclass(frozen=True)
class FollowUp:
    """What a run does with the earlier open findings and its own."""

    opened: list[tuple[str, dict]] = field(default_factory=list)  # (key, finding): found for the first time
    seen: list[tuple[OpenFinding, dict]] = field(default_factory=list)  # found again: as this run describes it
    carried: list[tuple[OpenFinding, dict]] = field(default_factory=list)  # not checked (or expired): still open
    closed: list[tuple[OpenFinding, str]] = field(default_factory=list)  # checked and fixed: why

    @property
    def open_count(self) -> int:
        return len(self.opened) + len(self.seen) + len(self.carried)


def follow_up(earlier: list[OpenFinding], report: Report, repair_of: str | None) -> FollowUp:
    """Sort ``earlier`` open findings and the ``report``'s own into opened, seen again, carried and
    closed. ``report`` must not carry earlier findings yet (``Report.carried`` empty)."""
    found: dict[str, dict] = {}
    for finding in report.found():
        key = finding_key(finding)
        if key is not None:
            found[key] = finding
    checks = {(c.pipeline, c.batch_id, c.topic, c.partition): c for c in report.checks}
    by_key = {f.key: f for f in earlier}
    fixed = "the repair's re-check found it fixed" if repair_of else "checked again: fixed"
    result = FollowUp(opened=[(k, f) for k, f in found.items() if k not in by_key])
    for f in earlier:
        if f.key in found:
            result.seen.append((f, found[f.key]))
        elif f.kind == RANGE:
            check = checks.get(range_key(f.finding))
            if check is None:
                result.carried.append((f, f.finding))
            elif check.outcome == "expired":  # cannot be checked any more: an operator decides
                result.carried.append((f, {**f.finding, "outcome": "expired", "was": f.finding["outcome"]}))
            else:
                result.closed.append((f, fixed))
        elif f.kind == EVENTS:
            named_all = f.finding["entity_count"] <= len(f.finding["sessions"])
            if report.used_spark and (named_all or repair_of):
                result.closed.append((f, fixed))
            else:
                result.carried.append((f, f.finding))
        else:  # a gap, sessions between the sinks: every run looks again
            result.closed.append((f, fixed))
    return result


def record(cur, run_id: str, follow: FollowUp) -> None:
    cur.executemany(
        """INSERT INTO findings (finding_key, kind, finding, opened_by, seen_by) VALUES (%s, %s, %s, %s, %s)""",
        [(key, kind_of(f), json.dumps(f), run_id, run_id) for key, f in follow.opened],
    )
    cur.executemany(
        "UPDATE findings SET finding = %s, seen_by = %s WHERE finding_id = %s",
        [(json.dumps(f), run_id, o.finding_id) for o, f in follow.seen + follow.carried],
    )
    cur.executemany(
        "UPDATE findings SET closed_by = %s, closed_at = now(), closed_why = %s WHERE finding_id = %s",
        [(run_id, why, o.finding_id) for o, why in follow.closed],
    )


_FINDING = "finding_id, finding_key, finding, opened_by, opened_at"


def read_open(cur) -> list[OpenFinding]:
    """The findings no check closed and no operator acknowledged, oldest first."""
    cur.execute(f"SELECT {_FINDING} FROM findings WHERE closed_at IS NULL ORDER BY finding_id")
    return [OpenFinding(*row) for row in cur.fetchall()]


def recent_findings(cur, limit: int) -> list[tuple]:
    """The open findings and the latest closed ones, up to ``limit``, open first then newest:
    (finding_id, finding, opened_by, opened_at, seen_by, closed_by, closed_at, closed_why)."""
    cur.execute(
        """SELECT finding_id, finding, opened_by, opened_at, seen_by, closed_by, closed_at, closed_why
           FROM findings ORDER BY closed_at IS NOT NULL, finding_id DESC LIMIT %s""",
        (limit,),
    )
    return cur.fetchall()


def acknowledge(cur, finding_ids: list[int], who: str, reason: str) -> list[OpenFinding]:
    """Close the open findings ``finding_ids`` as acknowledged by ``who`` for ``reason``; the ones closed.
    Raises ``ConfigError`` naming the ids that are not open (and closes none)."""
    cur.execute(
        f"SELECT {_FINDING} FROM findings WHERE closed_at IS NULL AND finding_id = ANY(%s) ORDER BY finding_id",
        (finding_ids,),
    )
    found = [OpenFinding(*row) for row in cur.fetchall()]
    missing = sorted(set(finding_ids) - {f.finding_id for f in found})
    if missing:
        raise ConfigError(
            f"no open finding {', '.join(f'#{i}' for i in missing)}: `tidemark findings` lists the open ones"
        )
    cur.execute(
        """UPDATE findings SET closed_by = %s, closed_at = now(), closed_why = %s
           WHERE finding_id = ANY(%s)""",
        (f"acknowledged by {who}", f"acknowledged: {reason}", finding_ids),
    )
    # What the sinks hold of an acknowledged range is taken as it is: its next check sets a new
    # baseline (against Kafka; expired when retention removed its start). An acknowledged gap is
    # an acknowledged loss, reported by every run as such and no gap any more.
    ranges = [f.finding for f in found if f.kind == RANGE]
    verified.forget(cur, [range_key(f) for f in ranges])
    gaps = [f.finding for f in found if f.kind == GAP]
    retention.record_acknowledged(
        cur, [Loss(g["pipeline"], g["topic"], g["partition"], g["start"], g["end"], False) for g in gaps]
    )
    return found


def latest_findings(cur) -> list[tuple]:
    """The latest 10 runs that did not pass, with their repair: (run_id, counted_at, status, alert,
    repair_id, repair status, recheck_run)."""
    cur.execute(
        """SELECT r.run_id, r.counted_at, r.status, r.alert, p.repair_id, p.status, p.recheck_run
           FROM reconcile_runs AS r LEFT JOIN repairs AS p ON p.reconcile_run = r.run_id
           WHERE r.status <> 'ok' ORDER BY r.counted_at DESC LIMIT 10"""
    )
    return cur.fetchall()


def open_findings_by_kind(cur) -> dict[str, int]:
    """How many findings of each kind are open."""
    cur.execute("SELECT kind, count(*) FROM findings WHERE closed_at IS NULL GROUP BY 1")
    return dict(cur.fetchall())
