"""The bench's figures: medians, rates, ratios held to targets, the table and the JSON document.

Everything here is plain computation on what the stages measured (tests/unit/test_bench.py),
except :func:`machine_info` and :func:`versions`, which describe where and with what it ran.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spark_jobs.settings import Settings
from tidemark.tables import aligned

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def median(values: Sequence[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None


def per_second(count: int, seconds: float | None) -> float | None:
    """``count`` per second, or None when there is no time or nothing was counted."""
    if seconds is None or seconds <= 0 or count <= 0:
        return None
    return count / seconds


def throughput_ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator`` of two rates (or two times), None if either is missing or zero."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


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


@dataclass
class Measurement:
    """Repeated timings of one stage, with the CPU time each repetition cost."""

    key: str
    label: str
    count: int  # events (or rows) each repetition processes
    unit: str = "events"
    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)  # bench process tree + Kafka + PostgreSQL
    cpu_seconds_client: list[float] = field(default_factory=list)  # bench process tree only (Python, JVM)
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, seconds: float, cpu_client: float = 0.0, cpu_services: float = 0.0) -> None:
        self.seconds.append(seconds)
        self.cpu_seconds_client.append(cpu_client)
        self.cpu_seconds.append(cpu_client + cpu_services)

    @property
    def median_seconds(self) -> float | None:
        return median(self.seconds)

    @property
    def rate(self) -> float | None:
        return per_second(self.count, self.median_seconds)

    @property
    def cpu_seconds_per_million(self) -> float | None:
        cpu = median(self.cpu_seconds)
        if cpu is None or self.count <= 0:
            return None
        return cpu / self.count * 1_000_000

    def to_json(self) -> dict[str, Any]:
        client = median(self.cpu_seconds_client)
        return {
            "label": self.label,
            self.unit: self.count,
            "unit": self.unit,
            "repetitions": len(self.seconds),
            "seconds": [round(s, 4) for s in self.seconds],
            "seconds_median": _round(self.median_seconds, 4),
            f"{self.unit}_per_second": _round(self.rate, 1),
            "cpu_seconds": [round(s, 3) for s in self.cpu_seconds],
            "cpu_seconds_median": _round(median(self.cpu_seconds), 3),
            "cpu_seconds_client_median": _round(client, 3),
            f"cpu_seconds_per_million_{self.unit}": _round(self.cpu_seconds_per_million, 2),
            "details": self.details,
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


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
            "value": _round(self.value, 4),
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


def build_checks(measurements: dict[str, Measurement]) -> list[Check]:
    """The issue's ratios and targets, from whichever stages were measured."""
    m = measurements
    checks: list[Check] = []

    def rate(key: str) -> float | None:
        return m[key].rate if key in m else None

    def seconds(key: str) -> float | None:
        return m[key].median_seconds if key in m else None

    if "P1" in m and "B2" in m:
        checks.append(
            Check(
                "P1/B2",
                "P1",
                "full ingest vs AvailableNow raw append, events/s",
                throughput_ratio(rate("P1"), rate("B2")),
                # At least 0.35 at 100k events (issue 47 holds 1M to that too; an earlier issue to 0.5,
                # the stricter of the two).
                Target(">=", 0.5 if m["P1"].count >= 1_000_000 else 0.35),
            )
        )
    if "P1" in m and "P1S" in m:
        checks.append(
            Check(
                "P1 CPU-s/M",
                "P1S",
                "P1's CPU-seconds per million events, from the slope between its two sizes",
                cpu_slope(m["P1"], m["P1S"]),
                Target("<=", 60),
            )
        )
    if "P1" in m and "B2L" in m:
        checks.append(
            Check(
                "P1/B2L",
                "P1",
                "full ingest vs land.py raw landing, events/s",
                throughput_ratio(rate("P1"), rate("B2L")),
            )
        )
    if "P1" in m and "B1" in m:
        checks.append(
            Check("P1/B1", "P1", "full ingest vs consumer drain, events/s", throughput_ratio(rate("P1"), rate("B1")))
        )
    for key, description, target in (
        ("P2c", "upsert path, cold insert vs COPY, rows/s", Target(">=", 0.4)),
        ("P2r", "upsert path, replay (nothing changes) vs COPY, rows/s", None),
        ("P2u", "upsert path, 10% of rows changed vs COPY, rows/s", Target(">=", 0.25)),
    ):
        if key in m and "B3" in m:
            checks.append(Check(f"{key}/B3", key, description, throughput_ratio(rate(key), rate("B3")), target))
    if "G1" in m and "G10" in m:
        checks.append(
            Check(
                "G10/G1",
                "G10",
                "run time of 10k new events, 10xN vs N stored sessions",
                throughput_ratio(seconds("G10"), seconds("G1")),
                Target("<=", 1.3),
            )
        )
    if "RC1" in m and "RC10" in m:
        checks.append(
            Check(
                "RC10/RC1",
                "RC10",
                "reconcile after 10k new events, 10xN vs N stored sessions, time",
                throughput_ratio(seconds("RC10"), seconds("RC1")),
                Target("<=", 1.3),
            )
        )
    if "RC10" in m:
        held = max(max(m[k].details.get("lock_seconds") or [0.0]) for k in ("RC1", "RC10") if k in m)
        checks.append(Check("RC lock", "RC10", "longest lake-lock hold of a reconcile (writers blocked), s",
                            held, Target("<=", 5.0)))  # fmt: skip
    if "E1" in m and "E0" in m:
        checks.append(
            Check(
                "E1/E0",
                "E1",
                "empty scheduled run vs trivial spark-submit, time",
                throughput_ratio(seconds("E1"), seconds("E0")),
                Target("<=", 1.5),
            )
        )
    for baseline, description, target in (
        ("E0", "cold scheduled run of 2,000 new events minus a trivial spark-submit, s", Target("<=", 6.0)),
        ("E0A", "the same, minus a trivial spark-submit with tidemark's class archive, s", None),
    ):
        e2, e0 = seconds("E2"), seconds(baseline)
        if e2 is not None and e0 is not None:
            checks.append(Check(f"E2-{baseline}", "E2", description, e2 - e0, target))
    if "DF" in m:
        checks.append(
            Check(
                "DF",
                "DF",
                "Spark SQL executions a steady batch cannot go below on this Delta (issue 47's target: 12)",
                m["DF"].count,
                Target("<=", 12),
                integer=True,
            )
        )
    if "H1" in m and "H2" in m:
        checks.append(
            Check(
                "H2/H1",
                "H2",
                "sessionize a hot key, 2x the events, time",
                throughput_ratio(seconds("H2"), seconds("H1")),
                Target("<=", 2.3),
            )
        )
    if "H2" in m and "HS" in m:
        checks.append(
            Check(
                "H2/HS",
                "H2",
                "sessionize a hot key vs the same events over 5,000 entities, time",
                throughput_ratio(seconds("H2"), seconds("HS")),
                Target("<=", 3.0),
            )
        )
    if "C0" in m and "C1" in m:
        checks.append(
            Check(
                "C1/C0",
                "C1",
                "contract check: Java vs the Variant SQL check it replaced, CPU-seconds",
                throughput_ratio(median(m["C1"].cpu_seconds_client), median(m["C0"].cpu_seconds_client)),
                Target("<=", 1.0),
            )
        )
        checks.append(
            Check(
                "C differ",
                "C1",
                "records the two contract checks classify differently (any column)",
                m["C1"].details.get("records_classified_differently"),
                Target("==", 0),
                integer=True,
            )
        )
    if "P1" in m and "PEER" in m:
        checks.append(
            Check(
                "P1/PEER",
                "P1",
                "full ingest vs the peer pipeline with sessions, events/s",
                throughput_ratio(rate("P1"), rate("PEER")),
                Target(">=", 1.5),  # issue 47
            )
        )
    if "S" in m:
        details = m["S"].details
        checks.append(
            Check(
                "S last/first",
                "S",
                "soak: median run time of the last runs vs the first",
                throughput_ratio(details.get("last_median_seconds"), details.get("first_median_seconds")),
                Target("<=", 1.2),
            )
        )
        before = details.get("files_before_maintenance") or []
        if len(before) >= 2:
            growth = max(before[-1][name] / max(1, before[0][name]) for name in before[0])
            checks.append(
                Check(
                    "S files",
                    "S",
                    "soak: live files before the last maintenance vs the first, largest table ratio",
                    round(growth, 3),
                    Target("<=", 1.2),
                )
            )
    if "R" in m:
        if "P1" in m:
            checks.append(
                Check("R/P1", "R", "replay backfill vs first run, time", throughput_ratio(seconds("R"), seconds("P1")))
            )
        details = m["R"].details
        checks.append(
            Check(
                "files",
                "R",
                "Delta data files added or removed by the replays",
                details.get("delta_files_rewritten"),
                Target("==", 0),
                integer=True,
            )
        )
        checks.append(
            Check(
                "rows",
                "R",
                "PostgreSQL session rows changed by the replays",
                details.get("postgres_rows_changed"),
                Target("==", 0),
                integer=True,
            )
        )
    return checks


TABLE_HEADER = ("stage", "events", "s (median)", "events/s", "ratio", "target", "result")


def table_rows(measurements: Iterable[Measurement], checks: Sequence[Check]) -> list[tuple[str, ...]]:
    """One row per measurement, its checks beside it (a further row for each extra check)."""
    rows: list[tuple[str, ...]] = []
    for m in measurements:
        count = f"{m.count:,}" if m.unit == "events" else f"{m.count:,} {m.unit}"
        seconds = m.median_seconds
        rate = m.rate
        first = (
            f"{m.key} {m.label}",
            count,
            "-" if seconds is None else f"{seconds:.2f}",
            "-" if rate is None else f"{rate:,.0f}",
        )
        mine = [c for c in checks if c.row == m.key]
        if not mine:
            rows.append((*first, "", "", ""))
        for i, check in enumerate(mine):
            lead = first if i == 0 else ("", "", "", "")
            rows.append((*lead, check.formatted_value(), str(check.target or ""), check.result))
    return rows


def format_table(measurements: Iterable[Measurement], checks: Sequence[Check]) -> str:
    """:func:`table_rows` under :data:`TABLE_HEADER`, in aligned columns (counts and times right-aligned)."""
    return "\n".join(aligned([TABLE_HEADER, *table_rows(measurements, checks)], right={1, 2, 3}, rule=True))


def results_document(
    meta: dict[str, Any], measurements: Iterable[Measurement], checks: Sequence[Check]
) -> dict[str, Any]:
    """Everything the run measured, as one JSON-serialisable document."""
    results = [c.result for c in checks]
    return {
        **meta,
        "stages": {m.key: m.to_json() for m in measurements},
        "checks": [c.to_json() for c in checks],
        "summary": {
            "passed": results.count("PASS"),
            "failed": results.count("FAIL"),
            "failed_checks": [c.key for c in checks if c.result == "FAIL"],
        },
    }


def machine_info() -> dict[str, Any]:
    """CPUs, platform, Python, load average and memory of this machine."""
    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        import psutil

        info["memory_bytes"] = psutil.virtual_memory().total
    except ImportError:
        pass
    return info


def versions(settings: Settings, spark: SparkSession | None, postgresql: str | None) -> dict[str, Any]:
    """Versions of the packages, jars, Spark, Java and PostgreSQL (``postgresql``, as the server reports it)."""
    from importlib.metadata import PackageNotFoundError, version

    found: dict[str, Any] = {}
    for package in ("pyspark", "delta-spark", "confluent-kafka", "psycopg2-binary", "pandas", "pyarrow"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    try:
        import confluent_kafka

        found["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:
        pass
    broker = sorted(settings.jars_dir.glob("kafka/kafka_2.13-*.jar"))
    found["kafka_broker"] = broker[0].stem.removeprefix("kafka_2.13-") if broker else None
    for prefix, name in (
        ("delta-spark_", "delta_jar"),
        ("spark-sql-kafka-0-10_", "spark_kafka_connector_jar"),
        ("kafka-clients-", "spark_kafka_clients_jar"),
    ):
        jars = sorted(settings.jars_dir.glob(f"spark/{prefix}*.jar"))
        found[name] = jars[0].stem if jars else None
    if spark is not None:
        with contextlib.suppress(Exception):  # a stopped session has no version to report
            found["spark"] = spark.version
    try:
        from tidemark.embedded.process import java_major_version

        found["java_major"] = java_major_version()
    except Exception:
        found["java_major"] = None
    found["postgresql"] = postgresql
    return found
