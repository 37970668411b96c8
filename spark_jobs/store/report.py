"""A reconcile run's report: what it checked and found, its verdict, and the lines it tells the operator.

Pure logic, no I/O. :mod:`spark_jobs.reconcile.run` measures (Kafka, Delta, PostgreSQL) and builds a
:class:`Report` of the findings' values (:mod:`spark_jobs.store.findings`); it stores as JSON
(``reconcile_runs.findings``), and :mod:`spark_jobs.repair` reads the stored findings back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_jobs.store.findings import (
    NEW,
    Gap,
    Lag,
    RangeCheck,
    SessionDifference,
    SessionsSummary,
    describe_open,
    lag_summary,
)
from spark_jobs.store.retention import Loss


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
