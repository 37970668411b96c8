"""The bench's checks: the ratios and counts it holds to targets, from whichever stages were measured.

A :class:`Check` is a figure (usually a ratio against a baseline measured in the same run) printed on
a measurement's row, and its :class:`Target` where the issues set one. :func:`build_checks` makes them
group by group, in the order the table and the JSON document list them (tests/unit/benchmarks/test_bench.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.figures import Measurement, median, rounded, throughput_ratio

Measurements = dict[str, Measurement]


@dataclass(frozen=True)
class Target:
    """A bound a figure must meet: ``value >= bound``, ``value <= bound`` or ``value == bound``."""

    op: str
    bound: float

    def __post_init__(self) -> None:
        if self.op not in (">=", "<=", "=="):
            raise ValueError(f"target operator must be >=, <= or ==, got {self.op!r}")

    def met(self, value: float) -> bool:
        if self.op == ">=":
            return value >= self.bound
        if self.op == "<=":
            return value <= self.bound
        return value == self.bound

    def __str__(self) -> str:
        return f"{self.op} {self.bound:g}" if self.op != "==" else f"= {self.bound:g}"


@dataclass(frozen=True)
class Check:
    """A figure (usually a ratio against a same-run baseline), and the target it is held to, if any."""

    key: str  # "P1/B2"
    row: str  # the measurement row it is printed on
    description: str
    value: float | None
    target: Target | None = None
    integer: bool = False  # a count (files, rows), not a ratio

    @property
    def passed(self) -> bool | None:
        """True / False against the target; None when there is no target or no value."""
        if self.target is None or self.value is None:
            return None
        return self.target.met(self.value)

    @property
    def result(self) -> str:
        if self.target is None:
            return "info"
        return {True: "PASS", False: "FAIL", None: "n/a"}[self.passed]

    def formatted_value(self) -> str:
        if self.value is None:
            return f"{self.key} n/a"
        return f"{self.key} {int(self.value)}" if self.integer else f"{self.key} {self.value:.2f}"

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.key,
            "description": self.description,
            "value": rounded(self.value, 4),
            "target": str(self.target) if self.target else None,
            "result": self.result,
        }


def cpu_slope(a: Measurement, b: Measurement) -> float | None:
    """CPU-seconds per million events between two sizes of one workload (median CPU of each): what
    each further event costs, a run's fixed cost left out. None for equal sizes."""
    cpu_a, cpu_b = median(a.cpu_seconds), median(b.cpu_seconds)
    if cpu_a is None or cpu_b is None or a.count == b.count:
        return None
    return (cpu_a - cpu_b) / (a.count - b.count) * 1_000_000


def _rate(m: Measurements, key: str) -> float | None:
    return m[key].rate if key in m else None


def _seconds(m: Measurements, key: str) -> float | None:
    return m[key].median_seconds if key in m else None


def _throughput(m: Measurements, key: str, row: str, description: str, target: Target | None = None) -> list[Check]:
    """``key`` "A/B": A's rate over B's (events or rows per second), when both were measured."""
    a, b = key.split("/")
    figure = throughput_ratio(_rate(m, a), _rate(m, b))
    return [Check(key, row, description, figure, target)] if a in m and b in m else []


def _time(m: Measurements, key: str, row: str, description: str, target: Target | None = None) -> list[Check]:
    """``key`` "A/B": A's median time over B's, when both were measured."""
    a, b = key.split("/")
    figure = throughput_ratio(_seconds(m, a), _seconds(m, b))
    return [Check(key, row, description, figure, target)] if a in m and b in m else []


def ingest_checks(m: Measurements) -> list[Check]:
    """P1 against the baselines that read the same topic (B2, B2L, B1), and its CPU slope (P1S)."""
    checks: list[Check] = []
    if "P1" in m and "B2" in m:
        # At least 0.35 at 100k events (issue 47 holds 1M to that too; an earlier issue to 0.5, the stricter).
        target = Target(">=", 0.5 if m["P1"].count >= 1_000_000 else 0.35)
        checks += _throughput(m, "P1/B2", "P1", "full ingest vs AvailableNow raw append, events/s", target)
    if "P1" in m and "P1S" in m:
        slope = cpu_slope(m["P1"], m["P1S"])
        description = "P1's CPU-seconds per million events, from the slope between its two sizes"
        checks.append(Check("P1 CPU-s/M", "P1S", description, slope, Target("<=", 60)))
    checks += _throughput(m, "P1/B2L", "P1", "full ingest vs land.py raw landing, events/s")
    checks += _throughput(m, "P1/B1", "P1", "full ingest vs consumer drain, events/s")
    return checks


def postgres_checks(m: Measurements) -> list[Check]:
    """The upsert path (P2c, P2r, P2u) against COPY (B3), rows per second."""
    checks: list[Check] = []
    for key, description, target in (
        ("P2c", "upsert path, cold insert vs COPY, rows/s", Target(">=", 0.4)),
        ("P2r", "upsert path, replay (nothing changes) vs COPY, rows/s", None),
        ("P2u", "upsert path, 10% of rows changed vs COPY, rows/s", Target(">=", 0.25)),
    ):
        checks += _throughput(m, f"{key}/B3", key, description, target)
    return checks


def growth_checks(m: Measurements) -> list[Check]:
    """A run and a reconcile on 10x the stored sessions against N (G10/G1, RC10/RC1), and the lake lock's hold."""
    checks = _time(m, "G10/G1", "G10", "run time of 10k new events, 10xN vs N stored sessions", Target("<=", 1.3))
    description = "reconcile after 10k new events, 10xN vs N stored sessions, time"
    checks += _time(m, "RC10/RC1", "RC10", description, Target("<=", 1.3))
    if "RC10" in m:
        held = max(max(m[k].details.get("lock_seconds") or [0.0]) for k in ("RC1", "RC10") if k in m)
        description = "longest lake-lock hold of a reconcile (writers blocked), s"
        checks.append(Check("RC lock", "RC10", description, held, Target("<=", 5.0)))
    return checks


def empty_run_checks(m: Measurements) -> list[Check]:
    """An empty scheduled run against a trivial spark-submit (E1/E0), and what a cold run adds to one (E2)."""
    checks = _time(m, "E1/E0", "E1", "empty scheduled run vs trivial spark-submit, time", Target("<=", 1.5))
    for baseline, description, target in (
        ("E0", "cold scheduled run of 2,000 new events minus a trivial spark-submit, s", Target("<=", 6.0)),
        ("E0A", "the same, minus a trivial spark-submit with tidemark's class archive, s", None),
    ):
        e2, e0 = _seconds(m, "E2"), _seconds(m, baseline)
        if e2 is not None and e0 is not None:
            checks.append(Check(f"E2-{baseline}", "E2", description, e2 - e0, target))
    return checks


def floor_checks(m: Measurements) -> list[Check]:
    """The Spark SQL executions a steady batch cannot go below (DF)."""
    if "DF" not in m:
        return []
    description = "Spark SQL executions a steady batch cannot go below on this Delta (issue 47's target: 12)"
    return [Check("DF", "DF", description, m["DF"].count, Target("<=", 12), integer=True)]


def hot_key_checks(m: Measurements) -> list[Check]:
    """Sessionizing a hot key: twice the events (H2/H1), and the same events over many entities (H2/HS)."""
    checks = _time(m, "H2/H1", "H2", "sessionize a hot key, 2x the events, time", Target("<=", 2.3))
    description = "sessionize a hot key vs the same events over 5,000 entities, time"
    return checks + _time(m, "H2/HS", "H2", description, Target("<=", 3.0))


def contract_checks(m: Measurements) -> list[Check]:
    """The Java contract check against the Variant SQL one it replaced: CPU (C1/C0), and records they differ on."""
    if "C0" not in m or "C1" not in m:
        return []
    cpu = throughput_ratio(median(m["C1"].cpu_seconds_client), median(m["C0"].cpu_seconds_client))
    differ = m["C1"].details.get("records_classified_differently")
    checks = [
        Check("C1/C0", "C1", "contract check: Java vs the Variant SQL check it replaced, CPU-seconds", cpu,
              Target("<=", 1.0)),
        Check("C differ", "C1", "records the two contract checks classify differently (any column)", differ,
              Target("==", 0), integer=True),
    ]  # fmt: skip
    if "C2" not in m:
        return checks
    avro = throughput_ratio(median(m["C2"].cpu_seconds_client), median(m["C1"].cpu_seconds_client))
    otherwise = m["C2"].details.get("records_decided_otherwise_than_c1")
    return checks + [
        Check("C2/C1", "C2", "Avro decode + check vs the JSON check, same records, CPU-seconds", avro,
              Target("<=", 1.0)),
        Check("C2 differ", "C2", "records the Avro and the JSON check decide otherwise (valid and fields)",
              otherwise, Target("==", 0), integer=True),
    ]  # fmt: skip


def peer_checks(m: Measurements) -> list[Check]:
    """P1 against the peer pipeline with sessions (issue 47's target)."""
    return _throughput(
        m, "P1/PEER", "P1", "full ingest vs the peer pipeline with sessions, events/s", Target(">=", 1.5)
    )


def soak_checks(m: Measurements) -> list[Check]:
    """The soak: the last runs' median time against the first's, and the live files' growth between maintenances."""
    if "S" not in m:
        return []
    details = m["S"].details
    slowdown = throughput_ratio(details.get("last_median_seconds"), details.get("first_median_seconds"))
    checks = [
        Check("S last/first", "S", "soak: median run time of the last runs vs the first", slowdown, Target("<=", 1.2))
    ]
    before = details.get("files_before_maintenance") or []
    if len(before) >= 2:
        growth = max(before[-1][name] / max(1, before[0][name]) for name in before[0])
        description = "soak: live files before the last maintenance vs the first, largest table ratio"
        checks.append(Check("S files", "S", description, round(growth, 3), Target("<=", 1.2)))
    return checks


def catchup_checks(m: Measurements) -> list[Check]:
    """The catch-up: its last batches against its first (sessions open throughout); a batch's fixed seconds."""
    checks = []
    if "CU" in m:
        details = m["CU"].details
        slowdown = throughput_ratio(details.get("last_median_seconds"), details.get("first_median_seconds"))
        description = "catch-up: median writer time of the last 4 batches vs the first 4"
        checks.append(Check("CU last4/first4", "CU", description, slowdown, Target("<=", 1.3)))
    if "BC" in m:
        details = m["BC"].details
        checks += [
            Check("fixed s", "BC", "a batch's fixed writer seconds (the fit's intercept)",
                  details.get("fixed_seconds")),
            Check("s/M", "BC", "a batch's writer seconds per million records (the fit's slope)",
                  details.get("seconds_per_million")),
        ]  # fmt: skip
    return checks


def collector_checks(m: Measurements) -> list[Check]:
    """Per run size of the collector stage: ParallelGC's median time and CPU over G1's (below 1: Parallel wins)."""
    checks = []
    for key in [k for k in m if k.startswith("GC PAR ")]:
        size = key.removeprefix("GC PAR ")
        parallel, g1 = m[key], m.get(f"GC G1 {size}")
        if g1 is None:
            continue
        checks += [
            Check(f"PAR/G1 {size}", key, f"cold run of {size} events: ParallelGC's median time over G1's",
                  throughput_ratio(parallel.median_seconds, g1.median_seconds)),
            Check(f"CPU PAR/G1 {size}", key, f"cold run of {size} events: ParallelGC's median CPU over G1's",
                  throughput_ratio(median(parallel.cpu_seconds), median(g1.cpu_seconds))),
        ]  # fmt: skip
    return checks


def replay_checks(m: Measurements) -> list[Check]:
    """The replay (R) against the first run, and what it changed in Delta and PostgreSQL (nothing)."""
    if "R" not in m:
        return []
    checks = _time(m, "R/P1", "R", "replay backfill vs first run, time")
    details = m["R"].details
    return checks + [
        Check("files", "R", "Delta data files added or removed by the replays", details.get("delta_files_rewritten"),
              Target("==", 0), integer=True),
        Check("rows", "R", "PostgreSQL session rows changed by the replays", details.get("postgres_rows_changed"),
              Target("==", 0), integer=True),
    ]  # fmt: skip


# The groups in the order the table and the JSON document list their checks.
CHECK_GROUPS: tuple[Callable[[Measurements], list[Check]], ...] = (
    ingest_checks,
    postgres_checks,
    growth_checks,
    empty_run_checks,
    floor_checks,
    hot_key_checks,
    contract_checks,
    peer_checks,
    soak_checks,
    catchup_checks,
    collector_checks,
    replay_checks,
)


def build_checks(measurements: Measurements) -> list[Check]:
    """The issue's ratios and targets, from whichever stages were measured."""
    return [check for group in CHECK_GROUPS for check in group(measurements)]
