"""tidemark's benchmark: the pipeline against baselines measured in the same run on the same data.

Absolute times on small shared machines are noisy, so every figure that has a target is a ratio
against a baseline taken in the same run (DESIGN.md, "Performance"; issue 5). Stages:

* **K0** (context) producing the synthetic events with confluent-kafka;
* **B1** draining the topic with a confluent-kafka consumer, ``read_committed`` (the read ceiling);
* **B2** a Structured Streaming ``AvailableNow`` raw append of the same range to Delta (the Spark
  baseline the issue names), and **B2L** (context) ``spark_jobs/land.py``, a bounded read landed
  raw by MERGE with a ledger row;
* **P1** the full ingest, ``ingest.run_scheduled``: parse, dedupe, sessionize, Delta MERGE,
  PostgreSQL upsert; P1/B2 as a throughput ratio;
* **B3** ``COPY`` of P1's session rows into an empty table with the ``sessions`` table's columns,
  constraints and indexes, against **P2** ``writer.upsert_sessions`` with the same rows: cold insert,
  a replay where every row conflicts and nothing changes, and a batch where 10% of rows changed;
* **G1 / G10** a scheduled run of 10k new events against sinks holding N and 10xN sessions (the
  sinks are pre-populated directly, with the pipeline's table schemas, from a consistent synthetic
  history; the measured run is a real ``ingest.run_scheduled`` over Kafka);
* **E0 / E1** a scheduled run with no new data (``spark-submit spark_jobs/ingest.py scheduled``)
  against a spark-submit of a trivial job;
* **R** P1's range replayed with a backfill (``ingest.run_backfill``): time against P1, Delta files
  rewritten and PostgreSQL rows changed (both must be 0). It takes as long as P1, so it runs
  ``--replay-repeat`` times (default once); between repetitions the previous replay's ledger row is
  deleted so each one is a real replay rather than a ledger no-op.

The bench runs its own Kafka and PostgreSQL (ports 39092/39093/35432, state in
``.tidemark/bench``), so it never touches the demo or test stacks. It starts what is not running,
stops what it started, and gives every stage its own topic, lake, checkpoints and PostgreSQL
database (copied from a migrated template), dropped at the end unless ``--keep``.

Run: ``tidemark bench`` (or ``python -m spark_jobs.bench``); ``--help`` lists the options.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from spark_jobs.settings import PROJECT_ROOT, Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.offsets import PartitionRange

T = TypeVar("T")

STAGES = ("b1", "b2", "b2l", "p1", "replay", "empty", "pg", "growth")
STAGE_HELP = {
    "b1": "confluent-kafka drain of the topic",
    "b2": "Spark AvailableNow raw append to Delta, the Spark baseline",
    "b2l": "Spark raw landing with land.py (context)",
    "p1": "full ingest (ingest.run_scheduled)",
    "replay": "backfill of P1's range: time, Delta files rewritten, PostgreSQL rows changed",
    "empty": "scheduled run with no new data vs trivial spark-submit",
    "pg": "COPY vs writer.upsert_sessions: cold, replay, 10%% changed",
    "growth": "10k new events against sinks with N and 10xN sessions",
}
BENCH_KAFKA_PORT = 39092
BENCH_KAFKA_CONTROLLER_PORT = 39093
BENCH_POSTGRES_PORT = 35432
EVENTS_PER_PREPOP_SESSION = 10
UPDATE_FRACTION = 0.10
TRIVIAL_APP = '''"""A trivial Spark job: the floor any spark-submit pays (tidemark bench, empty-run baseline)."""
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("tidemark-bench-trivial").getOrCreate()
print(spark.range(1).count())
spark.stop()
'''


def _default_home() -> Path:
    root = PROJECT_ROOT if (PROJECT_ROOT / "pyproject.toml").exists() else Path.cwd()
    return root / ".tidemark" / "bench"


# --------------------------------------------------------------------------------------------------
# Pure logic: figures, targets, the table and the JSON document (tests/unit/test_bench.py).


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
                Target(">=", 0.5),
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
    rows = [TABLE_HEADER, *table_rows(measurements, checks)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEADER))]
    right = {1, 2, 3}

    def line(row: Sequence[str]) -> str:
        cells = [
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    out = [line(rows[0]), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in rows[1:]]
    return "\n".join(out)


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


def parse_stages(text: str) -> tuple[str, ...]:
    """``"p1,b2"`` -> the named stages in run order; ``all`` for every stage."""
    names = [s.strip().lower() for s in text.split(",") if s.strip()]
    if not names or names == ["all"]:
        return STAGES
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    return tuple(s for s in STAGES if s in names)


# --------------------------------------------------------------------------------------------------
# Options and settings.


@dataclass(frozen=True)
class BenchOptions:
    events: int = 100_000
    repeat: int = 3
    pg_repeat: int = 5
    replay_repeat: int = 1
    stages: tuple[str, ...] = STAGES
    entities: int = 5_000
    duplicate_rate: float = 0.01
    late_rate: float = 0.02
    malformed_rate: float = 0.005
    partitions: int = 3
    seed: int = 7
    max_offsets_per_trigger: int | None = None
    growth_sessions: int = 10_000
    growth_events: int = 10_000
    home: Path = field(default_factory=_default_home)
    output: Path | None = None  # default: <home>/results.json
    kafka_port: int = BENCH_KAFKA_PORT
    kafka_controller_port: int = BENCH_KAFKA_CONTROLLER_PORT
    postgres_port: int = BENCH_POSTGRES_PORT
    keep: bool = False
    strict: bool = False

    def __post_init__(self) -> None:
        for name in (
            "events",
            "repeat",
            "pg_repeat",
            "replay_repeat",
            "entities",
            "partitions",
            "growth_sessions",
            "growth_events",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


def _positive(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be a positive whole number")
    return value


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction between 0 and 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``tidemark bench`` flags."""
    d = BenchOptions()
    stages = "; ".join(f"{k}: {v}" for k, v in STAGE_HELP.items())
    parser.add_argument(
        "--events",
        type=_positive,
        default=d.events,
        help=f"synthetic events produced for B1, B2, P1, replay (default {d.events:,})",
    )
    parser.add_argument(
        "--repeat",
        type=_positive,
        default=d.repeat,
        help=f"repetitions of each stage; figures are medians (default {d.repeat})",
    )
    parser.add_argument(
        "--pg-repeat",
        type=_positive,
        default=None,
        help=f"repetitions of the short PostgreSQL stages (default max(--repeat, {d.pg_repeat}))",
    )
    parser.add_argument(
        "--replay-repeat",
        type=_positive,
        default=d.replay_repeat,
        help=f"repetitions of the replay, as long as P1; its targets are counts (default {d.replay_repeat})",
    )
    parser.add_argument(
        "--stages", type=parse_stages, default=d.stages, help=f"comma-separated subset to run (default all). {stages}"
    )
    parser.add_argument(
        "--entities",
        type=_positive,
        default=d.entities,
        help=f"distinct entity_ids in the produced events (default {d.entities:,})",
    )
    parser.add_argument("--duplicate-rate", type=_rate, default=d.duplicate_rate)
    parser.add_argument("--late-rate", type=_rate, default=d.late_rate)
    parser.add_argument("--malformed-rate", type=_rate, default=d.malformed_rate)
    parser.add_argument("--partitions", type=_positive, default=d.partitions, help="partitions of the bench topics")
    parser.add_argument("--seed", type=int, default=d.seed)
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=_positive,
        default=None,
        help="passed to P1's scheduled run (default: none, as `tidemark ingest`)",
    )
    parser.add_argument(
        "--growth-sessions",
        type=_positive,
        default=d.growth_sessions,
        help=f"N, sessions in the smaller growth sink (default {d.growth_sessions:,})",
    )
    parser.add_argument(
        "--growth-events",
        type=_positive,
        default=d.growth_events,
        help=f"new events in each growth run (default {d.growth_events:,})",
    )
    parser.add_argument(
        "--home", type=Path, default=None, help="the bench's state folder (default .tidemark/bench in the checkout)"
    )
    parser.add_argument("--output", type=Path, default=None, help="JSON results file (default <home>/results.json)")
    parser.add_argument("--kafka-port", type=_positive, default=d.kafka_port)
    parser.add_argument("--kafka-controller-port", type=_positive, default=d.kafka_controller_port)
    parser.add_argument("--postgres-port", type=_positive, default=d.postgres_port)
    parser.add_argument("--keep", action="store_true", help="keep the run's topics, lakes and databases")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when a target is missed")


def options_from_arguments(args: argparse.Namespace) -> BenchOptions:
    d = BenchOptions()
    return BenchOptions(
        events=args.events,
        repeat=args.repeat,
        pg_repeat=args.pg_repeat or max(args.repeat, d.pg_repeat),
        replay_repeat=args.replay_repeat,
        stages=args.stages,
        entities=args.entities,
        duplicate_rate=args.duplicate_rate,
        late_rate=args.late_rate,
        malformed_rate=args.malformed_rate,
        partitions=args.partitions,
        seed=args.seed,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        growth_sessions=args.growth_sessions,
        growth_events=args.growth_events,
        home=args.home or d.home,
        output=args.output,
        kafka_port=args.kafka_port,
        kafka_controller_port=args.kafka_controller_port,
        postgres_port=args.postgres_port,
        keep=args.keep,
        strict=args.strict,
    )


def bench_settings(options: BenchOptions, env: dict[str, str] | None = None) -> Settings:
    """The bench's own services and state; only the jars are shared with the user's setup."""
    env = dict(os.environ) if env is None else env
    jars_dir = Settings.from_env(env).jars_dir  # where `make jars` put them
    return Settings.from_env(
        {
            "TIDEMARK_HOME": str(options.home),
            "TIDEMARK_KAFKA_PORT": str(options.kafka_port),
            "TIDEMARK_KAFKA_CONTROLLER_PORT": str(options.kafka_controller_port),
            "TIDEMARK_POSTGRES_PORT": str(options.postgres_port),
            "TIDEMARK_JARS_DIR": str(jars_dir),
        }
    )


# --------------------------------------------------------------------------------------------------
# Measuring.


class CpuMeter:
    """CPU seconds used so far by this process tree (Python, Spark's JVM, its Python workers, any
    spark-submit) and by the Kafka and PostgreSQL servers; reaped children included."""

    def __init__(self, service_pids: Callable[[], list[int]]) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._service_pids = service_pids

    def _times(self, proc) -> float:  # noqa: ANN001 - psutil.Process
        t = proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    def _tree(self, root, skip: set[int]) -> float:  # noqa: ANN001
        psutil = self._psutil
        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        skipped: set[int] = set()
        for proc in procs:
            if proc.pid in skip:
                skipped.add(proc.pid)
                with contextlib.suppress(psutil.NoSuchProcess):
                    skipped.update(child.pid for child in proc.children(recursive=True))
        total = 0.0
        for proc in procs:
            if proc.pid in skipped:
                continue
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                total += self._times(proc)
        return total

    def snapshot(self) -> tuple[float, float]:
        """(this process tree, the services), in CPU seconds."""
        services = [pid for pid in self._service_pids() if pid]
        client = self._tree(self._me, set(services))
        service_total = 0.0
        for pid in services:
            with contextlib.suppress(self._psutil.NoSuchProcess):
                service_total += self._tree(self._psutil.Process(pid), set())
        return client, service_total


@dataclass(frozen=True)
class Sink:
    """One stage's own lake, checkpoints, PostgreSQL database and topic."""

    name: str
    settings: Settings
    database: str
    root: Path


def _ensure(condition: bool, message: str) -> None:
    if not condition:
        raise RuntimeError(f"bench: {message}")


class Bench:
    def __init__(self, settings: Settings, options: BenchOptions, stream=None) -> None:  # noqa: ANN001
        from spark_jobs.embedded import KafkaBroker, PostgresServer

        self.settings = settings
        self.options = options
        self.stream = stream or sys.stderr
        self.run_id = datetime.now(UTC).strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:4]
        self.work = settings.home / "runs" / self.run_id
        self.kafka = KafkaBroker(settings)
        self.postgres = PostgresServer(settings)
        self.started_services: list = []
        self.measurements: dict[str, Measurement] = {}
        self.topics: list[str] = []
        self.databases: list[str] = []
        self.template_db = ""
        self.spark: SparkSession | None = None
        self.main_topic = ""
        self.main_ranges: list[PartitionRange] = []
        self.committed = 0
        self.main: Sink | None = None  # a sink that processed the main topic (P1's last)
        self.meta: dict[str, Any] = {}
        self.t0 = time.monotonic()
        self.cpu = CpuMeter(lambda: [p for p in (self.kafka.pid(), self.postgres.pid()) if p])

    # -- plumbing ---------------------------------------------------------------------------------

    def progress(self, message: str) -> None:
        print(f"[bench {time.monotonic() - self.t0:7.1f}s] {message}", file=self.stream, flush=True)

    def measurement(self, key: str, label: str, count: int, unit: str = "events") -> Measurement:
        if key not in self.measurements:
            self.measurements[key] = Measurement(key, label, count, unit)
        return self.measurements[key]

    def measure(self, m: Measurement, fn: Callable[[], T], note: Callable[[T], str] | None = None) -> T:
        """Run ``fn`` once, recording its wall time and CPU time in ``m``."""
        client0, services0 = self.cpu.snapshot()
        started = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - started
        client1, services1 = self.cpu.snapshot()
        m.add(elapsed, client1 - client0, services1 - services0)
        rate = per_second(m.count, elapsed)
        extra = f", {rate:,.0f} {m.unit}/s" if rate else ""
        suffix = f" ({note(result)})" if note else ""
        self.progress(f"{m.key} {m.label}: repetition {len(m.seconds)}: {elapsed:.2f} s{extra}{suffix}")
        return result

    def superuser(self):  # -> psycopg2 connection, autocommit
        import psycopg2

        conn = psycopg2.connect(self.postgres.superuser_dsn())
        conn.autocommit = True
        return conn

    def dsn(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.settings.postgres_port} dbname={database} user=tidemark"

    def create_database(self, name: str, template: str | None = None) -> str:
        """A new database ``bench_<run>_<name>``, copied from ``template`` (default: the migrated one)."""
        import psycopg2

        database = f"bench_{self.run_id}_{name}".replace("-", "_").lower()
        template = template or self.template_db
        conn = self.superuser()
        try:
            with conn.cursor() as cur:
                for attempt in range(50):
                    try:
                        if template:
                            cur.execute(f'CREATE DATABASE "{database}" TEMPLATE "{template}" OWNER tidemark')
                        else:
                            cur.execute(f'CREATE DATABASE "{database}" OWNER tidemark')
                        break
                    except psycopg2.errors.ObjectInUse:  # the template's last session is still closing
                        if attempt == 49:
                            raise
                        time.sleep(0.1)
        finally:
            conn.close()
        self.databases.append(database)
        return database

    def new_sink(self, name: str, topic: str, template: str | None = None, lake_from: Path | None = None) -> Sink:
        root = self.work / name
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        lake = root / "lake"
        if lake_from is not None:
            shutil.copytree(lake_from, lake)
        database = self.create_database(name, template)
        settings = replace(
            self.settings,
            lake_root=str(lake),
            checkpoint_root=str(root / "checkpoints"),
            postgres_dsn=self.dsn(database),
            topic=topic,
        )
        return Sink(name, settings, database, root)

    def produce(self, topic: str, count: int, entities: int, prefix: str, seed: int):  # -> ProduceReport
        from spark_jobs.producer import ProduceSpec, produce

        o = self.options
        spec = ProduceSpec(
            count=count,
            entities=entities,
            duplicate_rate=o.duplicate_rate,
            late_rate=o.late_rate,
            malformed_rate=o.malformed_rate,
            seed=seed,
            id_prefix=prefix,
        )
        self.topics.append(topic)
        return produce(self.settings, spec, topic=topic, partitions=o.partitions)

    # -- the run ----------------------------------------------------------------------------------

    def start(self) -> None:
        from spark_jobs.migrations import migrate
        from spark_jobs.spark import build_session, spark_jars

        spark_jars(self.settings)  # fail early with "run make jars"
        for service in (self.postgres, self.kafka):  # PostgreSQL first: fast, fails fast
            if not service.is_running():
                self.started_services.append(service)
            self.progress(service.start())
        self.template_db = ""
        self.template_db = self.create_database("template")
        migrate(self.dsn(self.template_db))
        self.progress(f"migrated template database {self.template_db}")
        started = time.perf_counter()
        self.spark = build_session(self.settings, "tidemark-bench")
        self.meta["spark_session_start_seconds"] = round(time.perf_counter() - started, 2)
        self.progress(f"Spark session started in {self.meta['spark_session_start_seconds']:.1f} s")

    def run(self) -> None:
        stages = set(self.options.stages)
        self.start()
        if stages & {"b1", "b2", "b2l", "p1", "replay", "empty", "pg"}:
            self.produce_main()
        if "b1" in stages:
            self.stage_b1()
        if stages & {"b2", "b2l", "p1"}:
            self.stage_spark()
        if "replay" in stages:
            self.stage_replay()
        if "empty" in stages:
            self.stage_empty()
        if "pg" in stages:
            self.stage_pg()
        if "growth" in stages:
            self.stage_growth()

    def produce_main(self) -> None:
        from spark_jobs.offsets import latest_ranges

        o = self.options
        self.main_topic = f"bench-{self.run_id}-main"
        m = self.measurement("K0", "produce (confluent-kafka producer)", o.events)
        report = self.measure(m, lambda: self.produce(self.main_topic, o.events, o.entities, f"{self.run_id}-", o.seed))
        self.committed = report.committed
        self.main_ranges = latest_ranges(self.settings, self.main_topic)
        m.details = {"produced_by_kind": dict(report.produced), "topic": self.main_topic}
        _ensure(self.committed == o.events, f"produced {self.committed} of {o.events} events")

    def stage_b1(self) -> None:
        m = self.measurement("B1", "Kafka drain (confluent-kafka consumer)", self.committed)
        sizes = []
        for _ in range(self.options.repeat):
            count, size = self.measure(m, lambda: drain(self.settings, self.main_ranges))
            _ensure(count == self.committed, f"B1 read {count} records, expected {self.committed}")
            sizes.append(size)
        m.details["bytes"] = sizes[-1]

    def stage_spark(self) -> None:
        """B2, B2L and P1, interleaved repetition by repetition so machine noise hits them alike."""
        from spark_jobs import ingest
        from spark_jobs.land import land

        stages = set(self.options.stages)
        n = self.committed
        b2l = self.measurement("B2L", "Spark raw landing (land.py)", n) if "b2l" in stages else None
        b2 = self.measurement("B2", "Spark AvailableNow raw append", n) if "b2" in stages else None
        p1 = self.measurement("P1", "full ingest (ingest.run_scheduled)", n) if "p1" in stages else None
        spark = self.spark
        for rep in range(self.options.repeat):
            if b2l is not None:
                sink = self.new_sink(f"b2l_{rep}", self.main_topic)
                report = self.measure(
                    b2l, lambda s=sink: land(spark, s.settings, self.main_ranges), lambda r: f"{r.records:,} records"
                )
                _ensure(report.records == n and not report.already_landed, f"B2L landed {report.records} of {n}")
                self.discard_lake(sink)
            if b2 is not None:
                sink = self.new_sink(f"b2_{rep}", self.main_topic)
                self.measure(b2, lambda s=sink: append_available_now(spark, s.settings, self.main_topic))
                landed = spark.read.format("delta").load(sink.settings.table_path("raw_append")).count()
                _ensure(landed == n, f"B2 appended {landed} of {n}")
                self.discard_lake(sink)
            if p1 is not None:
                sink = self.new_sink(f"p1_{rep}", self.main_topic)
                results = self.measure(
                    p1,
                    lambda s=sink: ingest.run_scheduled(
                        spark, s.settings, max_offsets_per_trigger=self.options.max_offsets_per_trigger
                    ),
                    lambda rs: f"{len(rs)} batch(es), {sum(r.sessions_written for r in rs):,} sessions written",
                )
                read = sum(r.read for r in results)
                _ensure(read == n, f"P1 read {read} of {n} records")
                p1.details = {
                    "batches": len(results),
                    "accepted": sum(r.accepted for r in results),
                    "duplicates": sum(r.duplicates for r in results),
                    "quarantined": sum(r.quarantined for r in results),
                    "sessions_written": sum(r.sessions_written for r in results),
                    "max_offsets_per_trigger": self.options.max_offsets_per_trigger,
                    # where a run's time goes, summed over its batches (last repetition)
                    "step_seconds": {
                        step: round(sum(r.seconds.get(step, 0.0) for r in results), 3)
                        for step in dict.fromkeys(k for r in results for k in r.seconds)
                    },
                }
                if self.main is not None:
                    self.discard_lake(self.main)
                self.main = sink

    def discard_lake(self, sink: Sink) -> None:
        if not self.options.keep:
            shutil.rmtree(sink.root, ignore_errors=True)

    def main_sink(self) -> Sink:
        """A sink that processed the main topic: P1's, or one made now (not measured)."""
        if self.main is None:
            from spark_jobs import ingest

            self.progress("ingesting the main topic once (not measured) for the replay / empty / pg stages")
            sink = self.new_sink("main", self.main_topic)
            results = ingest.run_scheduled(self.spark, sink.settings)
            _ensure(sum(r.read for r in results) == self.committed, "the unmeasured ingest missed records")
            self.main = sink
        return self.main

    def stage_replay(self) -> None:
        from spark_jobs import ingest, ledger
        from spark_jobs.writer import files_rewritten_since, table_versions

        sink = self.main_sink()
        s = sink.settings
        offsets = {r.partition: (r.start, r.end) for r in self.main_ranges}
        plan = ingest.plan_backfill(s, self.main_topic, offsets=offsets)
        m = self.measurement("R", "replay of P1's range (ingest.run_backfill)", self.committed)
        files_total, rows_total, fingerprints_equal = 0, 0, True
        per_rep = []
        for rep in range(self.options.replay_repeat):
            if rep:
                # Forget the previous replay so this one is a replay too, not a ledger no-op.
                conn = ledger.connect(s.postgres_dsn)
                with conn, conn.cursor() as cur:
                    cur.execute(
                        "DELETE FROM ledger_batches WHERE pipeline = %s",
                        (ingest.pipeline_name(ingest.BACKFILL, self.main_topic),),
                    )
                conn.close()
            versions = table_versions(self.spark, s)
            before = postgres_fingerprint(s)
            result = self.measure(m, lambda: ingest.run_backfill(self.spark, s, plan))
            _ensure(not result.skipped and result.read == self.committed, f"the replay did not re-read: {result}")
            files = files_rewritten_since(self.spark, s, versions)
            rows = result.sessions_written + result.sessions_deleted
            same = postgres_fingerprint(s) == before
            files_total += files
            rows_total += rows
            fingerprints_equal &= same
            per_rep.append({"delta_files_rewritten": files, "postgres_rows_changed": rows, "postgres_unchanged": same})
            self.progress(f"R replay {rep + 1}: {files} Delta files rewritten, {rows} PostgreSQL rows changed")
        m.details = {
            "delta_files_rewritten": files_total,
            "postgres_rows_changed": rows_total if fingerprints_equal else max(rows_total, 1),
            "postgres_fingerprint_unchanged": fingerprints_equal,
            "repetitions": per_rep,
        }

    def stage_empty(self) -> None:
        sink = self.main_sink()
        app = self.work / "trivial_app.py"
        app.parent.mkdir(parents=True, exist_ok=True)
        app.write_text(TRIVIAL_APP)
        from spark_jobs import ingest

        ingest_app = Path(ingest.__file__)
        e0 = self.measurement("E0", "trivial job (spark-submit)", 0)
        e1 = self.measurement("E1", "empty scheduled run (spark-submit ingest.py)", 0)
        env = submit_env(sink.settings)
        for _ in range(self.options.repeat):
            out = self.measure(e0, lambda: spark_submit(self.settings, app, [], env))
            _ensure(out.strip().endswith("1"), f"the trivial job printed {out!r}")
            out = self.measure(e1, lambda: spark_submit(self.settings, ingest_app, ["scheduled"], env))
            _ensure("no new records" in out, f"the empty scheduled run processed something: {out!r}")

    def stage_pg(self) -> None:
        from spark_jobs import ledger
        from spark_jobs.sessionize import SESSION_COLUMNS
        from spark_jobs.writer import _as_text, upsert_sessions

        sink = self.main_sink()
        sessions = self.spark.read.format("delta").load(sink.settings.table_path("sessions"))
        rows = _as_text(sessions, SESSION_COLUMNS)
        anchors = _as_text(
            sessions.groupBy("entity_id").agg({"started_at": "min"}).toDF("entity_id", "anchor"),
            ("entity_id", "anchor"),
        )
        changed = changed_rows(rows, UPDATE_FRACTION)
        n_changed = sum(1 for a, b in zip(rows, changed, strict=True) if a != b)
        n = len(rows)
        _ensure(n > 0, "P1 produced no sessions to benchmark PostgreSQL with")
        database = self.create_database("pg")
        conn = ledger.connect(self.dsn(database))
        b3 = self.measurement("B3", "COPY into an empty sessions-like table", n, "rows")
        p2c = self.measurement("P2c", "upsert_sessions, cold insert", n, "rows")
        p2r = self.measurement("P2r", "upsert_sessions, replay (all conflict, none change)", n, "rows")
        p2u = self.measurement("P2u", f"upsert_sessions, {UPDATE_FRACTION:.0%} of rows changed", n, "rows")
        for m in (b3, p2c, p2r, p2u):
            m.details = {"anchors": len(anchors)}
        p2u.details["rows_changed"] = n_changed

        def execute(sql: str) -> None:
            with conn, conn.cursor() as cur:
                cur.execute(sql)

        def upsert(batch: list[tuple]) -> tuple[int, int]:
            with conn, conn.cursor() as cur:
                return upsert_sessions(cur, batch, anchors)

        def copy() -> None:
            with conn, conn.cursor() as cur:
                copy_rows(cur, "sessions_copy", SESSION_COLUMNS, rows)

        try:
            execute("CREATE TABLE sessions_copy (LIKE sessions INCLUDING ALL)")
            for _ in range(self.options.pg_repeat):
                execute("TRUNCATE sessions_copy")
                self.measure(b3, copy)
                execute("TRUNCATE sessions")
                written = self.measure(p2c, lambda: upsert(rows), lambda r: f"written {r[0]:,}, deleted {r[1]:,}")
                _ensure(written == (n, 0), f"the cold upsert wrote {written}, expected ({n}, 0)")
                written = self.measure(p2r, lambda: upsert(rows), lambda r: f"written {r[0]:,}, deleted {r[1]:,}")
                _ensure(written == (0, 0), f"the replay upsert wrote {written}, expected (0, 0)")
                written = self.measure(p2u, lambda: upsert(changed), lambda r: f"written {r[0]:,}, deleted {r[1]:,}")
                _ensure(written == (n_changed, 0), f"the update upsert wrote {written}, expected ({n_changed}, 0)")
        finally:
            conn.close()

    def stage_growth(self) -> None:
        from spark_jobs import ingest

        o = self.options
        entities = max(1, o.growth_events // EVENTS_PER_PREPOP_SESSION)
        prefix = f"{self.run_id}-g-"
        templates = {scale: self.growth_template(scale, entities, prefix) for scale in (1, 10)}
        ms = {}
        for scale, (_, _, sessions) in templates.items():
            name = "N" if scale == 1 else "10xN"
            ms[scale] = self.measurement(
                f"G{scale}", f"{o.growth_events:,} new events, sink with {name}={sessions:,} sessions", o.growth_events
            )
        for rep in range(o.repeat):
            for scale, (lake, database, _) in templates.items():
                topic = f"bench-{self.run_id}-g{scale}-{rep}"
                report = self.produce(topic, o.growth_events, entities, prefix, o.seed + 1)
                _ensure(report.committed == o.growth_events, "growth events were not all produced")
                sink = self.new_sink(f"g{scale}_{rep}", topic, template=database, lake_from=lake)
                results = self.measure(
                    ms[scale],
                    lambda s=sink: ingest.run_scheduled(self.spark, s.settings),
                    lambda rs: f"{sum(r.sessions_written for r in rs):,} sessions written",
                )
                read = sum(r.read for r in results)
                _ensure(read == o.growth_events, f"the growth run read {read} of {o.growth_events}")
                ms[scale].details = {
                    "stored_sessions": templates[scale][2],
                    "stored_events": templates[scale][2] * EVENTS_PER_PREPOP_SESSION,
                    "entities": entities,
                    "sessions_written": sum(r.sessions_written for r in results),
                    "sessions_deleted": sum(r.sessions_deleted for r in results),
                }
                self.discard_lake(sink)

    def growth_template(self, scale: int, entities: int, prefix: str) -> tuple[Path, str, int]:
        """A lake and a database holding ``scale`` x N sessions of ``entities`` (not measured)."""
        o = self.options
        per_entity = max(1, round(o.growth_sessions * scale / entities))
        started = time.perf_counter()
        sink = self.new_sink(f"growth{scale}_template", f"bench-{self.run_id}-prepop")
        sessions = prepopulate(self.spark, sink.settings, entities, per_entity, prefix, o.partitions)
        self.progress(
            f"growth sink {scale}xN: {sessions:,} sessions, {sessions * EVENTS_PER_PREPOP_SESSION:,} events "
            f"written directly in {time.perf_counter() - started:.1f} s (not measured)"
        )
        return Path(sink.settings.lake_root), sink.database, sessions

    # -- the end ----------------------------------------------------------------------------------

    def cleanup(self) -> None:
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception as exc:  # noqa: BLE001 - clean-up continues whatever failed
                self.progress(f"stopping Spark failed: {exc}")
        if not self.options.keep:
            if self.topics and self.kafka.is_running():
                try:
                    delete_topics(self.settings, self.topics)
                except Exception as exc:  # noqa: BLE001
                    self.progress(f"deleting the bench topics failed: {exc}")
            if self.databases and self.postgres.is_running():
                try:
                    conn = self.superuser()
                    with conn.cursor() as cur:
                        for database in reversed(self.databases):
                            cur.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
                    conn.close()
                except Exception as exc:  # noqa: BLE001
                    self.progress(f"dropping the bench databases failed: {exc}")
            shutil.rmtree(self.work, ignore_errors=True)
        for service in reversed(self.started_services):
            try:
                self.progress(service.stop())
            except Exception as exc:  # noqa: BLE001
                self.progress(f"stopping a service failed: {exc}")

    def document(self, error: str | None = None) -> dict[str, Any]:
        measurements = list(self.measurements.values())
        meta = {
            "tidemark_bench": 1,
            "run_id": self.run_id,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "total_seconds": round(time.monotonic() - self.t0, 1),
            "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.options).items()},
            "machine": machine_info(),
            "versions": versions(self.settings, self.spark, self.postgres),
            **self.meta,
        }
        if error:
            meta["error"] = error
        return results_document(meta, measurements, build_checks(self.measurements))


def run_bench(settings: Settings, options: BenchOptions) -> dict[str, Any]:
    """Run the selected stages, print the table, write the JSON; returns the results document."""
    bench = Bench(settings, options)
    bench.progress(
        f"run {bench.run_id}: {options.events:,} events, {options.repeat} repetition(s), stages "
        f"{','.join(options.stages)}; state in {settings.home}; {os.cpu_count()} CPUs"
    )
    error = None
    document: dict[str, Any] = {}
    try:
        bench.run()
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        try:
            document = bench.document(error)  # versions need Spark and PostgreSQL: before clean-up
        finally:
            bench.cleanup()
        output = options.output or settings.home / "results.json"
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(document, indent=2, default=str) + "\n")
        measurements = list(bench.measurements.values())
        if measurements:
            print(format_table(measurements, build_checks(bench.measurements)))
        summary = document.get("summary", {})
        print(
            f"\n{os.cpu_count()} CPUs; {summary.get('passed', 0)} target(s) met, {summary.get('failed', 0)} missed"
            f"{' (' + ', '.join(summary['failed_checks']) + ')' if summary.get('failed_checks') else ''}; "
            f"{document.get('total_seconds', 0):.0f} s in all. JSON: {output}"
        )
    return document


def run_from_arguments(args: argparse.Namespace) -> int:
    options = options_from_arguments(args)
    document = run_bench(bench_settings(options), options)
    return 1 if options.strict and document["summary"]["failed"] else 0


def main(argv: list[str] | None = None) -> int:
    from spark_jobs.embedded import ServiceError

    parser = argparse.ArgumentParser(prog="tidemark bench", description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_arguments(args)
    except (ServiceError, ConnectionError, FileNotFoundError, ValueError) as exc:
        print(f"tidemark bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


# --------------------------------------------------------------------------------------------------
# The stages' workloads and probes.


def drain(settings: Settings, ranges: list[PartitionRange], idle_timeout: float = 30.0) -> tuple[int, int]:
    """Read every committed record of ``ranges`` with one consumer; returns (records, value bytes)."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    ends = {r.partition: r.end for r in ranges if r.size}
    consumer = Consumer(
        settings.kafka_client_config(
            **{
                "group.id": f"tidemark-bench-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges if r.size])
        count, size, idle = 0, 0, 0.0
        while ends:
            messages = consumer.consume(num_messages=10_000, timeout=1.0)
            if not messages:
                idle += 1.0
                if idle >= idle_timeout:
                    raise TimeoutError(f"no records for {idle_timeout:.0f} s; partitions left {sorted(ends)}")
                continue
            idle = 0.0
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        ends.pop(message.partition(), None)
                        continue
                    raise KafkaException(error)
                end = ends.get(message.partition())
                if end is None or message.offset() >= end:
                    continue
                count += 1
                value = message.value()
                size += len(value) if value else 0
                if message.offset() >= end - 1:
                    ends.pop(message.partition(), None)
        return count, size
    finally:
        consumer.close()


def append_available_now(spark: SparkSession, settings: Settings, topic: str) -> None:
    """Structured Streaming, AvailableNow: the topic appended raw to the Delta table ``raw_append``."""
    from spark_jobs.kafka_source import stream_reader

    query = (
        stream_reader(spark, settings, topic, None, True)
        .load()
        .select("topic", "partition", "offset", "timestamp", "timestampType", "key", "value")
        .writeStream.format("delta")
        .outputMode("append")
        .partitionBy("partition")
        .option("checkpointLocation", f"{settings.checkpoint_root}/raw_append")
        .trigger(availableNow=True)
        .start(settings.table_path("raw_append"))
    )
    query.awaitTermination()


def postgres_fingerprint(settings: Settings) -> tuple:
    from spark_jobs import ledger

    conn = ledger.connect(settings.postgres_dsn)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "SELECT count(*), coalesce(md5(string_agg(md5(s::text), '' ORDER BY session_id)), '') FROM sessions s"
            )
            return tuple(cur.fetchone())
    finally:
        conn.close()


def copy_rows(cur, table: str, columns: Sequence[str], rows: Sequence[tuple]) -> None:  # noqa: ANN001
    """COPY ``rows`` into ``table``, serialised exactly as the writer serialises its staging rows."""
    buffer = io.StringIO()
    for row in rows:
        buffer.write("\t".join("\\N" if value is None else str(value) for value in row) + "\n")
    buffer.seek(0)
    cur.copy_expert(f"COPY {table} ({', '.join(columns)}) FROM STDIN", buffer)


def changed_rows(rows: Sequence[tuple], fraction: float) -> list[tuple]:
    """``rows`` with every (1/fraction)-th session one event longer (event_count is column 6)."""
    step = max(1, round(1 / fraction))
    out = []
    for i, row in enumerate(rows):
        if i % step == 0:
            row = (*row[:6], str(int(row[6]) + 1), *row[7:])
        out.append(row)
    return out


def prepopulate(
    spark: SparkSession, settings: Settings, entities: int, sessions_per_entity: int, prefix: str, partitions: int
) -> int:
    """Write a consistent history straight into a fresh sink: Delta events and sessions, PostgreSQL sessions.

    Entity ``e`` (named as the producer names it) has one session per day for ``sessions_per_entity``
    days ending yesterday, each of 10 events one minute apart, so no new record can join them. The
    sessions are checked against the pipeline's own ``sessionize`` for a few entities. Returns the
    number of sessions.
    """
    from pyspark.sql import functions as F

    from spark_jobs import ledger
    from spark_jobs.sessionize import SESSION_COLUMNS, SESSION_ID_SPARK_SQL, SessionRules, sessionize
    from spark_jobs.writer import EVENT_COLUMNS, _as_text, ensure_tables

    m = EVENTS_PER_PREPOP_SESSION
    day_ms = 86_400_000
    base_ms = (int(time.time() * 1000) // day_ms - sessions_per_entity - 1) * day_ms
    total = entities * sessions_per_entity * m
    ensure_tables(spark, settings)
    base = spark.range(total).select(
        F.col("id"),
        (F.col("id") % entities).alias("e"),
        F.floor(F.col("id") / (entities * m)).alias("s"),
        (F.floor(F.col("id") / entities) % m).alias("j"),
    )
    base = base.withColumn("arrival_ms", F.lit(base_ms) + F.col("s") * day_ms + F.col("j") * 60_000 + F.col("e") * 50)
    entity_id = F.format_string("%sentity-%06d", F.lit(prefix), F.col("e"))
    events = base.select(
        F.lit(f"bench-prepop-{prefix}").alias("topic"),
        (F.col("e") % partitions).cast("int").alias("partition"),
        F.col("id").cast("long").alias("offset"),
        F.timestamp_millis("arrival_ms").alias("arrival_time"),
        F.concat(F.lit(f"{prefix}pre-"), F.col("id").cast("string")).alias("event_id"),
        entity_id.alias("entity_id"),
        F.lit("page_view").alias("event_type"),
        F.timestamp_millis(F.col("arrival_ms") - 5000).alias("event_time"),
        F.lit('{"page":"/p/1","value":1}').alias("properties"),
    ).select(*EVENT_COLUMNS)
    files = max(1, total // 50_000)
    (
        events.repartitionByRange(files, "arrival_time")
        .sortWithinPartitions("arrival_time")
        .write.format("delta")
        .mode("append")
        .save(settings.table_path("events"))
    )
    sessions = (
        base.groupBy("e", "s")
        .agg(F.min("arrival_ms").alias("start_ms"), F.max("arrival_ms").alias("end_ms"), F.count("*").alias("n"))
        .select(
            entity_id.alias("entity_id"),
            F.timestamp_millis("start_ms").alias("started_at"),
            F.timestamp_millis("end_ms").alias("ended_at"),
            F.timestamp_millis(F.col("start_ms") - 5000).alias("first_event_time"),
            F.timestamp_millis(F.col("end_ms") - 5000).alias("last_event_time"),
            F.col("n").cast("long").alias("event_count"),
            ((F.col("end_ms") - F.col("start_ms")) / 1000.0).cast("double").alias("duration_seconds"),
        )
        .withColumn("session_id", F.expr(SESSION_ID_SPARK_SQL))
        .select(*SESSION_COLUMNS)
    )
    (
        sessions.repartitionByRange(max(1, files // m), "started_at")
        .write.format("delta")
        .mode("append")
        .save(settings.table_path("sessions"))
    )
    stored = spark.read.format("delta").load(settings.table_path("sessions"))
    sample = [f"{prefix}entity-{e:06d}" for e in sorted({0, entities // 2, entities - 1})]
    stored_events = spark.read.format("delta").load(settings.table_path("events"))
    stored_events = stored_events.where(F.col("entity_id").isin(sample))
    expected = {tuple(r) for r in sessionize(stored_events, SessionRules()).collect()}
    actual = {tuple(r) for r in stored.where(F.col("entity_id").isin(sample)).select(*SESSION_COLUMNS).collect()}
    _ensure(expected == actual, "the pre-populated sessions differ from what sessionize computes")
    rows = _as_text(stored, SESSION_COLUMNS)
    conn = ledger.connect(settings.postgres_dsn)
    try:
        with conn, conn.cursor() as cur:
            copy_rows(cur, "sessions", SESSION_COLUMNS, rows)
            cur.execute("ANALYZE sessions")
    finally:
        conn.close()
    return len(rows)


def submit_env(settings: Settings) -> dict[str, str]:
    """The environment of a spark-submit of a tidemark job against ``settings`` (FACTS: PATH, PYSPARK_PYTHON)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIDEMARK_", "PYSPARK_GATEWAY", "PYSPARK_DRIVER"))}
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYSPARK_PYTHON"] = sys.executable
    env.update(
        {
            "TIDEMARK_HOME": str(settings.home),
            "TIDEMARK_KAFKA_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "TIDEMARK_POSTGRES_DSN": settings.postgres_dsn,
            "TIDEMARK_LAKE_ROOT": settings.lake_root,
            "TIDEMARK_CHECKPOINT_ROOT": settings.checkpoint_root,
            "TIDEMARK_TOPIC": settings.topic,
            "TIDEMARK_JARS_DIR": str(settings.jars_dir),
        }
    )
    if os.environ.get("TIDEMARK_SHUFFLE_PARTITIONS"):
        env["TIDEMARK_SHUFFLE_PARTITIONS"] = os.environ["TIDEMARK_SHUFFLE_PARTITIONS"]
    return env


def spark_submit(settings: Settings, app: Path, args: list[str], env: dict[str, str], timeout: float = 600) -> str:
    """spark-submit ``app`` with the options tidemark's jobs get; returns its stdout, raises on failure."""
    from spark_jobs.spark import spark_jars

    bin_dir = Path(sys.executable).parent
    submit = str(bin_dir / "spark-submit") if (bin_dir / "spark-submit").exists() else shutil.which("spark-submit")
    if submit is None:
        raise FileNotFoundError("spark-submit was not found next to this Python or on PATH; run `make venv`")
    command = [
        submit,
        "--master",
        os.environ.get("TIDEMARK_SPARK_MASTER", "local[2]"),
        "--jars",
        ",".join(str(j) for j in spark_jars(settings)),
        "--driver-memory",
        os.environ.get("TIDEMARK_SPARK_DRIVER_MEMORY", "2g"),
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        str(app),
        *args,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.splitlines()[-25:])
        raise RuntimeError(f"spark-submit {app.name} {' '.join(args)} failed ({done.returncode}):\n{tail}")
    return done.stdout


def delete_topics(settings: Settings, topics: list[str]) -> None:
    from spark_jobs.offsets import admin_client

    admin = admin_client(settings)  # keep a reference: the futures fail if the client is destroyed
    futures = admin.delete_topics(topics, operation_timeout=30)
    for future in futures.values():
        try:
            future.result(timeout=60)
        except Exception as exc:  # noqa: BLE001 - an already missing topic is fine
            if "UNKNOWN_TOPIC" not in str(exc):
                raise


def machine_info() -> dict[str, Any]:
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


def versions(settings: Settings, spark: SparkSession | None, postgres) -> dict[str, Any]:  # noqa: ANN001
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
        from spark_jobs.embedded.process import java_major_version

        found["java_major"] = java_major_version()
    except Exception:  # noqa: BLE001
        found["java_major"] = None
    found["postgresql"] = None
    if postgres is not None and postgres.is_running():
        import psycopg2

        try:
            conn = psycopg2.connect(postgres.superuser_dsn())
        except psycopg2.Error:
            return found
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW server_version")
                found["postgresql"] = cur.fetchone()[0]
        finally:
            conn.close()
    return found


if __name__ == "__main__":
    sys.exit(main())
