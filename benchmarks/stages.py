"""The throughput stages: the main topic (K0) and the runs that read it (B1, B2, B2L, PEER, P1), the
slope, and the helpers every stage uses (a measured ingest, the sink that ingested the main topic).

Every stage is a function of the run's :class:`~benchmarks.context.BenchContext`;
:func:`benchmarks.run.run_stages` runs the selected ones in order. The main topic is produced once (K0)
and read by B1, B2, B2L, P1 and the replay; the replay, empty-run and PostgreSQL stages use a sink that
ingested it (P1's last, or one ingested unmeasured)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks import profile
from benchmarks.context import BenchContext, MainTopic, Sink, ensure
from benchmarks.figures import Measurement
from benchmarks.workloads import (
    append_available_now,
    drain,
)

if TYPE_CHECKING:
    pass

NEEDS_MAIN_TOPIC = {"b1", "b2", "b2l", "peer", "p1", "batchcost", "replay", "empty", "pg"}


def produce_main(ctx: BenchContext) -> None:
    """K0: produce ``--events`` events to the run's main topic."""
    from spark_jobs.offsets import latest_ranges

    o = ctx.options
    topic = f"bench-{ctx.run_id}-main"
    m = ctx.record.measurement("K0", "produce (confluent-kafka producer)", o.events)
    report = ctx.record.measure(m, lambda: ctx.produce(topic, o.events, o.entities, f"{ctx.run_id}-", o.seed))
    ctx.main_topic = MainTopic(topic, latest_ranges(ctx.settings, topic), report.committed)
    m.details = {"produced_by_kind": dict(report.produced), "topic": topic}
    ensure(report.committed == o.events, f"produced {report.committed} of {o.events} events")


def stage_b1(ctx: BenchContext) -> None:
    """B1: drain the main topic with one read_committed consumer (the read ceiling)."""
    main = ctx.main
    m = ctx.record.measurement("B1", "Kafka drain (confluent-kafka consumer)", main.committed)
    sizes = []
    for _ in range(ctx.options.repeat):
        count, size = ctx.record.measure(m, lambda: drain(ctx.settings, main.ranges))
        ensure(count == main.committed, f"B1 read {count} records, expected {main.committed}")
        sizes.append(size)
    m.details["bytes"] = sizes[-1]


def stage_spark(ctx: BenchContext) -> None:
    """B2, B2L and P1, interleaved repetition by repetition so machine noise hits them alike."""
    stages = set(ctx.options.stages)
    n = ctx.main.committed
    record = ctx.record
    b2l = record.measurement("B2L", "Spark raw landing (land.py)", n) if "b2l" in stages else None
    b2 = record.measurement("B2", "Spark AvailableNow raw append", n) if "b2" in stages else None
    peer = record.measurement("PEER", "peer pipeline with sessions (bench/peer.py)", n) if "peer" in stages else None
    p1 = record.measurement("P1", "full ingest (ingest.run_scheduled)", n) if "p1" in stages else None
    # The first repetitions warm the JVM's compiler up and are not counted (scratch measurements).
    warmup = ctx.options.warmup
    for rep in range(warmup + ctx.options.repeat):
        if b2l is not None:
            _land_once(ctx, counted(b2l, rep >= warmup), rep)
        if b2 is not None:
            _append_once(ctx, counted(b2, rep >= warmup), rep)
        if peer is not None:
            _peer_once(ctx, counted(peer, rep >= warmup), rep)
        if p1 is not None:
            _ingest_once(ctx, counted(p1, rep >= warmup), rep)


def counted(m: Measurement, count: bool) -> Measurement:
    """``m``, or for a warm-up repetition a scratch copy of it that no figure reads."""
    return m if count else Measurement(m.key, f"{m.label} (warm-up, not counted)", m.count, m.unit)


def batch_cap(ctx: BenchContext) -> int:
    """Records per batch at most, the same for B2, PEER and P1: ``--max-offsets-per-trigger``, or the settings'
    ``TIDEMARK_MAX_OFFSETS_PER_TRIGGER`` (``auto``: what a scheduled run of the main topic would choose)."""
    from dataclasses import replace

    from spark_jobs.batch_size import resolved

    chosen = ctx.options.max_offsets_per_trigger or ctx.settings.max_offsets_per_trigger
    return resolved(ctx.spark, replace(ctx.settings, topic=ctx.main.name), chosen) or 0


def _land_once(ctx: BenchContext, m: Measurement, rep: int) -> None:
    """One B2L repetition: land the main topic's ranges raw into a fresh lake with ``land.py``."""
    from spark_jobs.land import land

    main, n = ctx.main, ctx.main.committed
    sink = ctx.new_sink(f"b2l_{rep}", main.name)
    report = ctx.record.measure(
        m, lambda: land(ctx.spark, sink.settings, main.ranges), lambda r: f"{r.records:,} records"
    )
    ensure(report.records == n and not report.already_landed, f"B2L landed {report.records} of {n}")
    ctx.discard(sink)


def _append_once(ctx: BenchContext, m: Measurement, rep: int) -> None:
    """One B2 repetition: append the main topic raw to a fresh lake with an AvailableNow query."""
    main, n = ctx.main, ctx.main.committed
    sink = ctx.new_sink(f"b2_{rep}", main.name)
    ctx.record.measure(m, lambda: append_available_now(ctx.spark, sink.settings, main.name, batch_cap(ctx)))
    landed = ctx.spark.read.format("delta").load(sink.settings.table_path("raw_append")).count()
    ensure(landed == n, f"B2 appended {landed} of {n}")
    ctx.discard(sink)


def _peer_once(ctx: BenchContext, m: Measurement, rep: int) -> None:
    """One PEER repetition: the peer pipeline over the main topic into a fresh sink."""
    from benchmarks.peer import PEER_EVENTS, run_peer

    main, n = ctx.main, ctx.main.committed
    sink = ctx.new_sink(f"peer_{rep}", main.name)
    read = ctx.record.measure(m, lambda: run_peer(ctx.spark, sink.settings, main.name, batch_cap(ctx)))
    ensure(read == n, f"PEER read {read} of {n} records")
    stored = ctx.spark.read.format("delta").load(sink.settings.table_path(PEER_EVENTS)).count()
    ensure(0 < stored <= n, f"PEER stored {stored} events of {n} records")
    m.details = {"events_stored": stored}
    ctx.discard(sink)


def stage_slope(ctx: BenchContext) -> None:
    """P1S: P1 on a topic of ``--slope-events`` events, so that P1's CPU-seconds per million events
    come from the slope between two sizes (a batch's fixed cost left out), not from one size."""
    from spark_jobs.offsets import latest_ranges

    o = ctx.options
    topic = f"bench-{ctx.run_id}-slope"
    ctx.record.progress(f"producing {o.slope_events:,} events for the slope (not measured)")
    report = ctx.produce(topic, o.slope_events, o.entities, f"{ctx.run_id}-s-", o.seed + 1)
    ensure(report.committed == o.slope_events, f"produced {report.committed} of {o.slope_events} events")
    slope = MainTopic(topic, latest_ranges(ctx.settings, topic), report.committed)
    m = ctx.record.measurement("P1S", "full ingest, the slope's second size", report.committed)
    for rep in range(o.warmup + o.repeat):
        _ingest_once(ctx, counted(m, rep >= o.warmup), rep, slope)


def _ingest_once(ctx: BenchContext, m: Measurement, rep: int, source: MainTopic | None = None) -> None:
    """One P1 repetition: a scheduled ingest of the main topic (or ``source``) into a fresh sink; the
    main topic's is kept as ``ctx.ingested``."""
    from spark_jobs import ingest

    main = source or ctx.main
    n = main.committed
    per_trigger = batch_cap(ctx)
    sink = ctx.new_sink(f"{m.key.lower()}_{rep}", main.name)
    before = profile.last_job_id(ctx.spark)
    queries = profile.counters(ctx.spark)
    results = ctx.record.measure(
        m,
        lambda: ingest.run_scheduled(ctx.spark, sink.settings, max_offsets_per_trigger=per_trigger),
        lambda rs: f"{len(rs)} batch(es), {sum(r.sessions_written for r in rs):,} sessions written",
    )
    read = sum(r.read for r in results)
    ensure(read == n, f"P1 read {read} of {n} records")
    ran = profile.run_profile(ctx.spark, sink.settings, queries, len(results))
    ctx.record.progress(f"{m.key} {ran.describe()}")
    m.details = {
        "profile": ran.to_json(),
        "batches": len(results),
        "accepted": sum(r.accepted for r in results),
        "duplicates": sum(r.duplicates for r in results),
        "quarantined": sum(r.quarantined for r in results),
        "sessions_written": sum(r.sessions_written for r in results),
        "max_offsets_per_trigger": per_trigger,
        # where a run's time goes, summed over its batches (last repetition)
        "step_seconds": {
            step: round(sum(r.seconds.get(step, 0.0) for r in results), 3)
            for step in dict.fromkeys(k for r in results for k in r.seconds)
        },
    }
    if before is not None:  # the Spark UI is on (TIDEMARK_SPARK_UI=true): which jobs the run started
        m.details["spark_jobs"] = profile.jobs_since(ctx.spark, before)
    if source is not None:
        ctx.discard(sink)
        return
    if ctx.ingested is not None:
        ctx.discard(ctx.ingested)
    ctx.ingested = sink


def ingested_sink(ctx: BenchContext) -> Sink:
    """A sink that processed the main topic: P1's, or one made now (not measured)."""
    if ctx.ingested is None:
        from spark_jobs import ingest

        ctx.record.progress("ingesting the main topic once (not measured) for the replay / empty / pg stages")
        sink = ctx.new_sink("main", ctx.main.name)
        results = ingest.run_scheduled(ctx.spark, sink.settings)
        ensure(sum(r.read for r in results) == ctx.main.committed, "the unmeasured ingest missed records")
        ctx.ingested = sink
    return ctx.ingested
