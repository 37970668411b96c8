"""Findings stay open until fixed: which earlier findings a run closes, keeps, or carries over.

Pure logic, no I/O (:mod:`spark_jobs.reconcile.history` stores them in the ``findings`` table). A
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

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spark_jobs.reconcile.findings import Report

RANGE, GAP, SINKS, EVENTS = "range", "gap", "sessions_sinks", "sessions_events"


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
