"""The stages of one concern each: a hot key, the contract check's cost per record, the counted floor of
a batch, and the soak."""

from __future__ import annotations

import functools
import gc
import operator
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from benchmarks.avro_contract import checked as avro_checked
from benchmarks.context import BenchContext, ensure, session_rules
from benchmarks.figures import Measurement, median
from benchmarks.workloads import (
    HOTKEY_SPREAD_ENTITIES,
    steady_events,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row

    from spark_jobs.settings import Settings

SOAK_RULES_GAP = timedelta(seconds=10)
SOAK_RULES_MAX = timedelta(minutes=5)
SOAK_WINDOW = 50  # runs at each end whose medians are compared


def stage_hotkey(ctx: BenchContext) -> None:
    """H1 / H2 / HS: sessionize one entity never idle for 30 minutes over 48 h, with n/2 and n events,
    and n events of 5,000 entities; the events are generated in Spark and cached, so only
    ``sessionize`` is timed (every session is computed: the run sums their event counts)."""
    from pyspark.sql import functions as F

    from spark_jobs.sessionize import sessionize
    from spark_jobs.spark import FrozenFrames

    n = ctx.options.hotkey_events
    cases = (
        ("H1", f"one entity, {n // 2:,} events over 48 h", n // 2, 1),
        ("H2", f"one entity, {n:,} events over 48 h", n, 1),
        ("HS", f"{n:,} events of {HOTKEY_SPREAD_ENTITIES:,} entities over 48 h", n, HOTKEY_SPREAD_ENTITIES),
    )
    inputs = {key: steady_events(ctx.spark, count, entities) for key, _, count, entities in cases}
    ms = {key: ctx.record.measurement(key, label, count) for key, label, count, _ in cases}
    rules = session_rules(ctx.settings)

    def sessions_of(events: DataFrame) -> Row:  # as the writer runs it: burst summaries frozen, then released
        with FrozenFrames(ctx.spark) as frozen:
            row = sessionize(events, rules, frozen).agg(F.count("*"), F.sum("event_count")).first()
        assert row is not None  # an aggregate without groups is one row
        return row

    for _ in range(ctx.options.repeat):
        for key, _, count, _ in cases:
            row = ctx.record.measure(
                ms[key], functools.partial(sessions_of, inputs[key]), lambda r: f"{r[0]:,} sessions"
            )
            ensure(row[1] == count, f"{key}: the sessions hold {row[1]} of {count} events")
            ms[key].details = {"sessions": row[0]}
    for events in inputs.values():
        events.unpersist()


def stage_contract(ctx: BenchContext) -> None:
    """C0 / C1 / C2: the contract check alone, on ``--contract-events`` records of the produced mix (kept
    in Parquet, no Kafka): today's Variant SQL check before the Java one
    (``benchmarks/variant_contract.py``), the Java check (``spark_jobs.validation``), and the same
    records as Avro decoded and checked (``benchmarks/avro_contract.py``). Each repetition reads the
    records and checks them all (a no-op write), so all pay the same read; the records on which
    C0 and C1 differ in any column are counted (the target is none), and those on which C2 decides
    otherwise than C1."""
    from pyspark.sql import functions as F

    from benchmarks.avro_contract import avro_records
    from benchmarks.variant_contract import variant_parse_records
    from spark_jobs.pipelines import EVENTS_CONTRACT
    from spark_jobs.validation import parse_records

    n = ctx.options.contract_events
    started = time.perf_counter()
    path, rows = contract_records(ctx)
    avro = avro_records(ctx, rows, f"bench-{ctx.work.name}-value")
    seconds = time.perf_counter() - started
    ctx.record.progress(f"contract: {n:,} records written to Parquet, JSON and Avro, in {seconds:.1f} s (not measured)")
    raw = ctx.spark.read.parquet(path)
    variant = variant_parse_records(raw)
    java = parse_records(raw, EVENTS_CONTRACT)
    checks = (
        ("C0", "Variant SQL check (before)", lambda: variant),
        ("C1", "Java check", lambda: java),
        # An Avro batch registers its check anew (asking the registry again for an id it did not know): measured.
        ("C2", "Avro decode + Java check", lambda: avro_checked(avro)),
    )
    try:
        ms = measure_checks(ctx, checks, n)
        ms["C2"].details = {"records_decided_otherwise_than_c1": decided_otherwise(java, avro_checked(avro))}
    finally:
        stopped = avro.stop()
        if stopped:
            ctx.record.progress(stopped)
    columns = ("event_id", "entity_id", "event_type", "event_time", "properties", "quarantine_reason")
    before = variant.select("offset", *[F.col(c).alias(f"b_{c}") for c in columns])
    same = [F.col(f"b_{c}").eqNullSafe(F.col(c)) for c in columns]
    joined = before.join(java, "offset", "full_outer")
    differ = joined.where(~functools.reduce(operator.and_, same)).count()
    ms["C1"].details = {"records_classified_differently": differ}
    ensure(differ == 0, f"contract: the Java check and the Variant check differ on {differ} of {n} records")


def contract_records(ctx: BenchContext) -> tuple[str, list[tuple]]:
    """``--contract-events`` records of the produced mix, in Parquet: its path, and the rows (topic, partition,
    offset, key, value)."""
    from pyspark.sql import functions as F

    from tidemark.producer import ProduceSpec, generate

    o = ctx.options
    spec = ProduceSpec(count=o.contract_events, entities=o.entities, duplicate_rate=o.duplicate_rate,
                       late_rate=o.late_rate, malformed_rate=o.malformed_rate, seed=o.seed)  # fmt: skip
    path = str(ctx.work / "contract-records.parquet")
    rows = [("bench", i % o.partitions, i, r.key, r.value) for i, r in enumerate(generate(spec))]
    schema = "topic string, partition int, offset long, key binary, value binary"
    ctx.spark.createDataFrame(rows, schema).withColumn("timestamp", F.current_timestamp()).write.parquet(path)
    return path, rows


def measure_checks(
    ctx: BenchContext, checks: tuple[tuple[str, str, Callable[[], DataFrame]], ...], n: int
) -> dict[str, Measurement]:
    """Each check's frame written to nowhere (every record checked), after ``--warmup`` rounds, ``--repeat``
    times, in turn: a measurement each."""
    ms = {key: ctx.record.measurement(key, label, n, unit="records") for key, label, _ in checks}

    def check_all(frame: Callable[[], DataFrame]) -> None:
        frame().write.format("noop").mode("overwrite").save()

    for _ in range(ctx.options.warmup):
        for _, _, frame in checks:
            check_all(frame)
    for _ in range(ctx.options.repeat):
        for key, _, frame in checks:
            ctx.record.measure(ms[key], functools.partial(check_all, frame))
    return ms


def decided_otherwise(json_checked: DataFrame, avro_checked: DataFrame) -> int:
    """Records of the JSON check and the Avro one that are not both quarantined, or both valid with equal fields."""
    from pyspark.sql import functions as F

    columns = ("event_id", "entity_id", "event_type", "event_time", "properties")
    left = json_checked.select("offset", F.col("quarantine_reason").isNull().alias("j_valid"),
                               *[F.col(c).alias(f"j_{c}") for c in columns])  # fmt: skip
    joined = left.join(avro_checked, "offset", "full_outer")
    valid = F.col("quarantine_reason").isNull()
    same = [F.col(f"j_{c}").eqNullSafe(F.col(c)) for c in columns]
    agree = (F.col("j_valid") == valid) & (~valid | functools.reduce(operator.and_, same))
    return joined.where(~F.coalesce(agree, F.lit(False))).count()


def stage_floor(ctx: BenchContext) -> None:
    """DF: what Delta runs by itself for the reads and writes every batch keeps
    (:func:`benchmarks.floor.delta_floor`), counted; the row's count is the floor of a batch."""
    from benchmarks.floor import delta_floor

    root = ctx.work / "floor"
    root.mkdir(parents=True, exist_ok=True)
    m = ctx.record.measurement("DF", "batch floor: Delta's executions + 2 (benchmarks/floor.py)", 0, unit="executions")
    counts = ctx.record.measure(m, lambda: delta_floor(ctx.spark, root))
    m.count = counts["floor"]
    m.details = counts
    for name, n in counts.items():
        if name != "floor":
            ctx.record.progress(f"floor: {name}: {n} Spark SQL executions")
    ctx.record.progress(f"floor: a batch that keeps the first four runs at least {counts['floor']} (the target: 12)")


def stage_soak(ctx: BenchContext) -> None:
    """S: ``--soak-batches`` scheduled runs of ``--soak-events`` new events each into one sink (months
    of 15-minute runs, compressed), the maintenance DAG's work after every ``--soak-maintenance-every``
    runs (not timed). The last runs' median must be within 1.2x of the first's, and each table's file
    count bounded (the targets in ``checks``)."""
    from spark_jobs.contract import SessionRules

    o = ctx.options
    topic = f"bench-{ctx.run_id}-soak"
    sink = ctx.new_sink("soak", topic)
    settings = replace(sink.settings, session_rules=SessionRules(SOAK_RULES_GAP, SOAK_RULES_MAX))
    m = ctx.record.measurement("S", f"soak: a scheduled run of {o.soak_events:,} new events", o.soak_events)
    soak = Soak()
    for run in range(o.soak_batches):
        soak.steps.append(_soak_run(ctx, m, settings, topic, run))
        if (run + 1) % o.soak_maintenance_every == 0:
            _soak_maintenance(ctx, settings, run, soak)
    m.details = _soak_details(ctx, m, settings, soak)
    ctx.discard(sink)


@dataclass
class Soak:
    """What the soak saw besides its runs' times."""

    files: list[dict[str, int]] = field(default_factory=list)  # live files of each table before each maintenance
    maintenance_seconds: list[float] = field(default_factory=list)
    steps: list[dict[str, float]] = field(default_factory=list)  # each run's time per writer step (its batches')


def _soak_run(ctx: BenchContext, m: Measurement, settings: Settings, topic: str, run: int) -> dict[str, float]:
    """One soak run: new events produced (not timed), then a scheduled run of them (timed in ``m``); returns the
    run's seconds per writer step, summed over its batches."""
    from spark_jobs import ingest

    o = ctx.options
    # New event_ids every run (the seed), the same entities (the prefix).
    report = ctx.produce(topic, o.soak_events, o.entities, f"{ctx.run_id}-soak-", o.seed * 100_000 + run)
    ensure(report.committed == o.soak_events, f"soak run {run}: produced {report.committed} of {o.soak_events}")
    results = ctx.record.measure(m, lambda: ingest.run_scheduled(ctx.spark, settings))
    read = sum(r.read for r in results)
    ensure(read == o.soak_events, f"soak run {run} read {read} of {o.soak_events} records")
    # A scheduled run is a process of its own; here all runs share one driver. py4j caches each
    # method Python calls on a JVM object in that object's proxy, and the method refers back to
    # it: a cycle, so the JVM objects a finished run used (its query, plans, datasets) stay
    # referenced until Python's cycle collector runs: without this, 14 finished queries and 190
    # query executions were alive at run 120 of a soak; with it, 1 and 44 at run 91.
    gc.collect()
    names = {step for r in results for step in r.seconds}
    return {step: sum(r.seconds.get(step, 0.0) for r in results) for step in names}


def _live_files(ctx: BenchContext, settings: Settings) -> dict[str, int]:
    """The live files of each of the sink's tables."""
    from spark_jobs.contract import TABLE_SCHEMAS
    from spark_jobs.maintenance import live_files

    return {name: live_files(ctx.spark, settings.table_path(name)) for name in TABLE_SCHEMAS}


def _soak_maintenance(ctx: BenchContext, settings: Settings, run: int, soak: Soak) -> None:
    """The maintenance DAG's work after ``run`` (not timed in S): the live files before it, and how long it took."""
    from spark_jobs.maintenance import maintain

    soak.files.append(_live_files(ctx, settings))
    started = time.perf_counter()
    maintain(ctx.spark, settings)
    soak.maintenance_seconds.append(round(time.perf_counter() - started, 2))
    ctx.record.progress(
        f"S maintenance after run {run + 1}: {soak.maintenance_seconds[-1]:.1f} s; files {soak.files[-1]}"
    )


def _soak_details(ctx: BenchContext, m: Measurement, settings: Settings, soak: Soak) -> dict[str, Any]:
    """S's details: the medians of its first and last runs, the files before each maintenance and at the end, and
    the median of each writer step over consecutive windows of runs."""
    window = min(SOAK_WINDOW, max(1, len(m.seconds) // 2))
    return {
        "runs": len(m.seconds),
        "window": window,
        "first_median_seconds": median(m.seconds[:window]),
        "last_median_seconds": median(m.seconds[-window:]),
        "files_before_maintenance": soak.files,
        "files_at_end": _live_files(ctx, settings),
        "maintenance_seconds": soak.maintenance_seconds,
        "step_medians_by_window": step_medians(m.seconds, soak.steps, window),
        "session_rules": {"gap_seconds": SOAK_RULES_GAP.total_seconds(), "max_seconds": SOAK_RULES_MAX.total_seconds()},
    }


def step_medians(run_seconds: list[float], steps: list[dict[str, float]], window: int) -> list[dict[str, Any]]:
    """Which step grows: the median of each writer step over consecutive windows of runs (none empty).
    "run" is the whole scheduled run; what the steps leave of it is the stream's own work."""
    return [
        {
            "runs": f"{i + 1}-{min(i + window, len(steps))}",
            "run": round(statistics.median(run_seconds[i : i + window]), 3),
            **{
                step: round(statistics.median([s.get(step, 0.0) for s in steps[i : i + window]]), 3)
                for step in steps[i]
            },
        }
        for i in range(0, len(steps), window)
    ]
