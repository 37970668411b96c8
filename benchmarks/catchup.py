"""A catch-up after an outage: a backlog of millions of events, every entity's session open across its batches.

CU produces ``--catchup-events`` events over the bench's entities within minutes (so each entity's session
stays open from the first batch to the last) and runs one scheduled ingest of them at a cap that makes
``--catchup-batches`` batches. Before sessions were continued from their stored rows, each batch read again
the stored events of every open session, so a later batch cost more than an earlier one and the backlog's cost
grew faster than its records. The figure: the median writer time of the last four batches over the first
four's (target <= 1.3).

BC fits a batch's writer time against its records over P1's topic ingested at three caps (the whole topic,
a half, a quarter per batch): the intercept is a batch's fixed seconds, the slope its seconds per million.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from benchmarks.context import BenchContext, ensure
from benchmarks.figures import median

if TYPE_CHECKING:
    from spark_jobs.settings import Settings
    from spark_jobs.store.runs import BatchResult

# The batches at each end of the backlog whose medians are compared.
ENDS = 4
# P1's topic per batch at each of BC's three caps.
COST_SHARES = (1, 2, 4)


def stage_catchup(ctx: BenchContext) -> None:
    """CU: one scheduled run through the backlog; each batch's writer time, the ends' medians."""
    from spark_jobs import ingest

    o = ctx.options
    topic = f"bench-{ctx.run_id}-catchup"
    ctx.record.progress(f"producing the catch-up backlog: {o.catchup_events:,} events (not measured)")
    report = ctx.produce(topic, o.catchup_events, o.entities, f"{ctx.run_id}-cu-", o.seed + 3)
    ensure(report.committed == o.catchup_events, f"produced {report.committed} of {o.catchup_events} events")
    cap = math.ceil(report.committed / o.catchup_batches)
    sink = ctx.new_sink("catchup", topic)
    m = ctx.record.measurement(
        "CU", f"catch-up: {report.committed:,} events in batches of {cap:,}, sessions open throughout", report.committed
    )
    results = ctx.record.measure(
        m,
        lambda: ingest.run_scheduled(ctx.spark, sink.settings, max_offsets_per_trigger=cap),
        lambda rs: f"{len(rs)} batches",
    )
    ensure(sum(r.read for r in results) == report.committed, "the catch-up missed records")
    m.details = catchup_details(results, cap, sink.settings.continue_sessions)
    ctx.record.progress(
        f"CU first {ENDS} batches' median {m.details['first_median_seconds']} s, last {ENDS}' "
        f"{m.details['last_median_seconds']} s"
    )
    ctx.discard(sink)


def batch_seconds(result: BatchResult) -> float:
    """The writer's seconds for one batch: its steps' laps (plan, writes, PostgreSQL commit)."""
    return round(sum(result.seconds.values()), 3)


def catchup_details(results: list[BatchResult], cap: int, continuing: bool) -> dict[str, Any]:
    """CU's details: each batch's records, writer seconds and continued sessions; the ends' medians."""
    seconds = [batch_seconds(r) for r in results]
    ends = min(ENDS, len(seconds) // 2)
    return {
        "batches": len(results),
        "max_offsets_per_trigger": cap,
        "continue_sessions": continuing,
        "batch_records": [r.read for r in results],
        "batch_seconds": seconds,
        "batch_steps": [r.seconds for r in results],  # where each batch's time went (parse, dedupe, sessions, ...)
        "sessions_continued": [r.sessions_continued for r in results],
        "first_median_seconds": median(seconds[:ends]) if ends else None,
        "last_median_seconds": median(seconds[-ends:]) if ends else None,
    }


def stage_batch_cost(ctx: BenchContext) -> None:
    """BC: P1's topic ingested into fresh sinks at three caps; a batch's fixed seconds and seconds per million."""
    from spark_jobs import ingest

    main = ctx.main
    m = ctx.record.measurement("BC", "batch cost: P1's topic at three caps (the fit's points)", main.committed)
    points: list[tuple[int, float]] = []
    for rep in range(ctx.options.warmup):  # the JVM's compiler warms up on whole runs no point comes from
        sink = ctx.new_sink(f"bc_warmup_{rep}", main.name)
        ingest.run_scheduled(ctx.spark, sink.settings, max_offsets_per_trigger=main.committed)
        ctx.discard(sink)
    for share in COST_SHARES:
        cap = math.ceil(main.committed / share)
        sink = ctx.new_sink(f"bc_{share}", main.name)

        def ingest_at(settings: Settings = sink.settings, cap: int = cap) -> list[BatchResult]:
            return ingest.run_scheduled(ctx.spark, settings, max_offsets_per_trigger=cap)

        results = ctx.record.measure(m, ingest_at)
        ensure(sum(r.read for r in results) == main.committed, f"BC at cap {cap:,} missed records")
        points += [(r.read, batch_seconds(r)) for r in results]
        ctx.discard(sink)
    m.details = batch_cost(points)
    ctx.record.progress(
        f"BC fixed {m.details['fixed_seconds']} s a batch, {m.details['seconds_per_million']} s per million records"
    )


def batch_cost(points: list[tuple[int, float]]) -> dict[str, Any]:
    """The least-squares line of writer seconds against records over ``points`` (records, seconds): its intercept
    (fixed seconds) and slope (seconds per million records)."""
    records = [p[0] for p in points]
    if len(set(records)) < 2:
        return {"points": points, "fixed_seconds": None, "seconds_per_million": None}
    slope, intercept = statistics.linear_regression(records, [p[1] for p in points])
    return {
        "points": points,
        "fixed_seconds": round(intercept, 3),
        "seconds_per_million": round(slope * 1_000_000, 3),
    }
