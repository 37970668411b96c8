"""The stages: each produces or reads its workload, times it in its measurements and checks its counts.

Every stage is a function of the run's :class:`~benchmarks.context.BenchContext`;
:func:`run_stages` runs the selected ones in order. The main topic is produced once (K0) and read
by B1, B2, B2L, P1 and the replay; the replay, empty-run and PostgreSQL stages use a sink that
ingested it (P1's last, or one ingested unmeasured).
"""

from __future__ import annotations

import functools
import gc
import operator
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks import profile
from benchmarks.context import BenchContext, MainTopic, Sink, ensure
from benchmarks.figures import Measurement, median
from benchmarks.workloads import (
    EVENTS_PER_PREPOP_SESSION,
    HOTKEY_SPREAD_ENTITIES,
    TRIVIAL_APP,
    append_available_now,
    changed_rows,
    drain,
    prepopulate,
    spark_submit,
    steady_events,
)
from spark_jobs.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row

UPDATE_FRACTION = 0.10
NEEDS_MAIN_TOPIC = {"b1", "b2", "b2l", "peer", "p1", "replay", "empty", "pg"}


def run_stages(ctx: BenchContext) -> None:
    """Run the selected stages, in :data:`~benchmarks.options.STAGES` order."""
    stages = set(ctx.options.stages)
    if stages & NEEDS_MAIN_TOPIC:
        produce_main(ctx)
    if "b1" in stages:
        stage_b1(ctx)
    if stages & {"b2", "b2l", "peer", "p1"}:
        stage_spark(ctx)
    if "slope" in stages:
        stage_slope(ctx)
    if "replay" in stages:
        stage_replay(ctx)
    if "empty" in stages:
        stage_empty(ctx)
    if "pg" in stages:
        stage_pg(ctx)
    if "growth" in stages:
        stage_growth(ctx)
    if "hotkey" in stages:
        stage_hotkey(ctx)
    if "contract" in stages:
        stage_contract(ctx)
    if "floor" in stages:
        stage_floor(ctx)
    if "soak" in stages:
        stage_soak(ctx)


def produce_main(ctx: BenchContext) -> None:
    """K0: produce ``--events`` events to the run's main topic."""
    from spark_jobs.offsets import latest_ranges

    o = ctx.options
    topic = f"bench-{ctx.run_id}-main"
    m = ctx.record.measurement("K0", "produce (confluent-kafka producer)", o.events)
    report = ctx.record.measure(m, lambda: ctx.produce(topic, o.events, o.entities, f"{ctx.run_id}-", o.seed))
    ctx.main = MainTopic(topic, latest_ranges(ctx.settings, topic), report.committed)
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
    """Records per batch at most, the same for B2, PEER and P1: ``--max-offsets-per-trigger``, or
    the settings' ``TIDEMARK_MAX_OFFSETS_PER_TRIGGER``."""
    return ctx.options.max_offsets_per_trigger or ctx.settings.max_offsets_per_trigger


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


def stage_replay(ctx: BenchContext) -> None:
    """R: P1's range again as a backfill; Delta files rewritten and PostgreSQL rows changed must be 0."""
    from spark_jobs import db, ingest
    from spark_jobs.planning import plan_backfill
    from spark_jobs.sinks.delta import files_rewritten_since, table_versions

    main = ctx.main
    s = ingested_sink(ctx).settings
    plan = plan_backfill(s, main.name, offsets={r.partition: (r.start, r.end) for r in main.ranges})
    m = ctx.record.measurement("R", "replay of P1's range (ingest.run_backfill)", main.committed)
    files_total, rows_total, summaries_equal = 0, 0, True
    per_rep = []
    for rep in range(ctx.options.replay_repeat):
        if rep:
            # Forget the previous replay so this one is a replay too, not a ledger no-op.
            with db.transaction(s.postgres_dsn) as cur:
                cur.execute(
                    "DELETE FROM ledger_batches WHERE pipeline = %s",
                    (ingest.pipeline_name(ingest.BACKFILL, main.name),),
                )
        versions = table_versions(ctx.spark, s)
        before = _postgres_sessions(s)
        result = ctx.record.measure(m, lambda: ingest.run_backfill(ctx.spark, s, plan))
        ensure(not result.skipped and result.read == main.committed, f"the replay did not re-read: {result}")
        files = files_rewritten_since(ctx.spark, s, versions)
        rows = result.sessions_written + result.sessions_deleted
        same = _postgres_sessions(s) == before
        files_total += files
        rows_total += rows
        summaries_equal &= same
        per_rep.append({"delta_files_rewritten": files, "postgres_rows_changed": rows, "postgres_unchanged": same})
        ctx.record.progress(f"R replay {rep + 1}: {files} Delta files rewritten, {rows} PostgreSQL rows changed")
    m.details = {
        "delta_files_rewritten": files_total,
        "postgres_rows_changed": rows_total if summaries_equal else max(rows_total, 1),
        "postgres_fingerprint_unchanged": summaries_equal,
        "repetitions": per_rep,
    }


def _postgres_sessions(settings: Settings) -> tuple[int, int]:
    """(rows, checksum) of the sink's PostgreSQL ``sessions``."""
    from spark_jobs import db
    from spark_jobs.sinks.postgres import sessions_summary

    with db.transaction(settings.postgres_dsn) as cur:
        return sessions_summary(cur)


COLD_EVENTS = 2_000


def stage_empty(ctx: BenchContext) -> None:
    """E0 / E1 / E2, each a spark-submit of its own (a cold JVM, as a DAG's run is): a trivial job
    that starts a SparkSession and stops, a scheduled run with nothing new to read, and a scheduled
    run of :data:`COLD_EVENTS` new events into a lake that holds earlier ones."""
    from spark_jobs import ingest
    from spark_jobs.runs import unread_records

    def scheduled_run(settings: Settings) -> str:
        """A scheduled run submitted as a DAG's task submits it: for the records it will read."""
        return spark_submit(settings, ingest_app, ["scheduled"], records=unread_records(settings, settings.topic))

    settings = ingested_sink(ctx).settings
    app = ctx.work / "trivial_app.py"
    app.parent.mkdir(parents=True, exist_ok=True)
    app.write_text(TRIVIAL_APP)
    ingest_app = Path(ingest.__file__)
    o = ctx.options
    topic = f"bench-{ctx.run_id}-cold"
    cold = ctx.new_sink("cold", topic)
    ctx.produce(topic, COLD_EVENTS, o.entities, f"{ctx.run_id}-c0-", o.seed + 2)
    scheduled_run(cold.settings)  # the lake and its first events (not measured)
    e0 = ctx.record.measurement("E0", "trivial job (spark-submit)", 0)
    e0a = ctx.record.measurement("E0A", "trivial job, classes from tidemark's class archive", 0)
    e1 = ctx.record.measurement("E1", "empty scheduled run (spark-submit ingest.py)", 0)
    e2 = ctx.record.measurement("E2", "cold scheduled run of new events (spark-submit ingest.py)", COLD_EVENTS)
    plain = replace(settings, class_archive=False)  # Spark's own start: every class from its jar
    for rep in range(o.repeat):
        for measurement, submitted in ((e0, plain), (e0a, settings)):
            out = ctx.record.measure(measurement, lambda s=submitted: spark_submit(s, app, []))
            ensure(out.strip().endswith("1"), f"the trivial job printed {out!r}")
        out = ctx.record.measure(e1, lambda: scheduled_run(settings))
        ensure("no new records" in out, f"the empty scheduled run processed something: {out!r}")
        ctx.produce(topic, COLD_EVENTS, o.entities, f"{ctx.run_id}-c{rep + 1}-", o.seed + 3 + rep)
        out = ctx.record.measure(e2, lambda: scheduled_run(cold.settings))
        ensure(f"read {COLD_EVENTS:,} " in out, f"the cold scheduled run did not read {COLD_EVENTS:,} records: {out!r}")
    ctx.discard(cold)


def stage_pg(ctx: BenchContext) -> None:
    """B3 against P2: COPY of the main sink's sessions into an empty sessions-like table, then the upsert
    path with the same rows: cold insert, a replay where nothing changes, and 10% of rows changed."""
    from spark_jobs import db
    from spark_jobs.contract import SESSION_COLUMNS
    from spark_jobs.sinks.postgres import copy_rows, rows_as_text, upsert_sessions

    sessions = ctx.spark.read.format("delta").load(ingested_sink(ctx).settings.table_path("sessions"))
    rows = rows_as_text(sessions, SESSION_COLUMNS)
    anchors = rows_as_text(
        sessions.groupBy("entity_id").agg({"started_at": "min"}).toDF("entity_id", "anchor"),
        ("entity_id", "anchor"),
    )
    changed = changed_rows(rows, UPDATE_FRACTION)
    n_changed = sum(1 for a, b in zip(rows, changed, strict=True) if a != b)
    n = len(rows)
    ensure(n > 0, "P1 produced no sessions to benchmark PostgreSQL with")
    record = ctx.record
    b3 = record.measurement("B3", "COPY into an empty sessions-like table", n, "rows")
    p2c = record.measurement("P2c", "upsert_sessions, cold insert", n, "rows")
    p2r = record.measurement("P2r", "upsert_sessions, replay (all conflict, none change)", n, "rows")
    p2u = record.measurement("P2u", f"upsert_sessions, {UPDATE_FRACTION:.0%} of rows changed", n, "rows")
    for m in (b3, p2c, p2r, p2u):
        m.details = {"anchors": len(anchors)}
    p2u.details["rows_changed"] = n_changed
    conn = db.connect(ctx.services.dsn(ctx.services.create_database("pg")))

    def execute(sql: str) -> None:
        with conn, conn.cursor() as cur:
            cur.execute(sql)

    def upsert(batch: list[tuple]) -> tuple[int, int]:
        with conn, conn.cursor() as cur:
            return upsert_sessions(cur, batch, anchors)

    def copy() -> None:
        with conn, conn.cursor() as cur:
            copy_rows(cur, "sessions_copy", SESSION_COLUMNS, rows)

    def written(r: tuple[int, int]) -> str:
        return f"written {r[0]:,}, deleted {r[1]:,}"

    try:
        execute("CREATE TABLE sessions_copy (LIKE sessions INCLUDING ALL)")
        for _ in range(ctx.options.pg_repeat):
            execute("TRUNCATE sessions_copy")
            record.measure(b3, copy)
            execute("TRUNCATE sessions")
            done = record.measure(p2c, lambda: upsert(rows), written)
            ensure(done == (n, 0), f"the cold upsert wrote {done}, expected ({n}, 0)")
            done = record.measure(p2r, lambda: upsert(rows), written)
            ensure(done == (0, 0), f"the replay upsert wrote {done}, expected (0, 0)")
            done = record.measure(p2u, lambda: upsert(changed), written)
            ensure(done == (n_changed, 0), f"the update upsert wrote {done}, expected ({n_changed}, 0)")
    finally:
        conn.close()


def stage_growth(ctx: BenchContext) -> None:
    """G1 / G10: ``--growth-events`` new events ingested into sinks already holding N and 10xN sessions;
    RC1 / RC10: a reconcile of each right after (writers blocked: how long it held the lake lock)."""
    from spark_jobs import ingest, reconcile

    o = ctx.options
    entities = max(1, o.growth_events // EVENTS_PER_PREPOP_SESSION)
    prefix = f"{ctx.run_id}-g-"
    templates = {scale: _growth_template(ctx, scale, entities, prefix) for scale in (1, 10)}
    ms = {}
    for scale, (_, _, sessions) in templates.items():
        name = "N" if scale == 1 else "10xN"
        ms[scale] = ctx.record.measurement(
            f"G{scale}", f"{o.growth_events:,} new events, sink with {name}={sessions:,} sessions", o.growth_events
        )
    rc = {
        scale: ctx.record.measurement(
            f"RC{scale}", f"reconcile after G{scale}: its new ranges and their entities' sessions", o.growth_events
        )
        for scale in templates
    }
    for rep in range(o.repeat):
        for scale, (lake, database, stored) in templates.items():
            topic = f"bench-{ctx.run_id}-g{scale}-{rep}"
            report = ctx.produce(topic, o.growth_events, entities, prefix, o.seed + 1)
            ensure(report.committed == o.growth_events, "growth events were not all produced")
            sink = ctx.new_sink(f"g{scale}_{rep}", topic, template=database, lake_from=lake)
            results = ctx.record.measure(
                ms[scale],
                lambda s=sink: ingest.run_scheduled(ctx.spark, s.settings),
                lambda rs: f"{sum(r.sessions_written for r in rs):,} sessions written",
            )
            read = sum(r.read for r in results)
            ensure(read == o.growth_events, f"the growth run read {read} of {o.growth_events}")
            ms[scale].details = {
                "stored_sessions": stored,
                "stored_events": stored * EVENTS_PER_PREPOP_SESSION,
                "entities": entities,
                "sessions_written": sum(r.sessions_written for r in results),
                "sessions_deleted": sum(r.sessions_deleted for r in results),
            }
            # RC: reconcile the sink after that ingest (its new ranges, the sessions of their entities).
            report = ctx.record.measure(
                rc[scale],
                lambda s=sink, name=f"bench-rc{scale}-{rep}": reconcile.run(s.settings, name, lambda: ctx.spark),
                lambda rep_: f"{rep_.status}, lake lock held {rep_.snapshot_seconds:.2f} s",
            )
            ensure(report.ok, f"reconcile of the growth sink found something:\n{report.summary()}")
            rc[scale].details = {
                "lock_seconds": rc[scale].details.get("lock_seconds", []) + [round(report.snapshot_seconds, 3)],
                "ranges_checked": len(report.checks),
                "entities_checked": report.entities_checked,
            }
            ctx.discard(sink)


def _growth_template(ctx: BenchContext, scale: int, entities: int, prefix: str) -> tuple[Path, str, int]:
    """A lake and a database holding ``scale`` x N sessions of ``entities`` (not measured)."""
    o = ctx.options
    per_entity = max(1, round(o.growth_sessions * scale / entities))
    started = time.perf_counter()
    sink = ctx.new_sink(f"growth{scale}_template", f"bench-{ctx.run_id}-prepop")
    sessions = prepopulate(ctx.spark, sink.settings, entities, per_entity, prefix, o.partitions)
    ctx.record.progress(
        f"growth sink {scale}xN: {sessions:,} sessions, {sessions * EVENTS_PER_PREPOP_SESSION:,} events "
        f"written directly in {time.perf_counter() - started:.1f} s (not measured)"
    )
    return Path(sink.settings.lake_root), sink.database, sessions


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
    rules = ctx.settings.session_rules

    def sessions_of(events: DataFrame) -> Row:  # as the writer runs it: burst summaries frozen, then released
        with FrozenFrames(ctx.spark) as frozen:
            return sessionize(events, rules, frozen).agg(F.count("*"), F.sum("event_count")).first()

    for _ in range(ctx.options.repeat):
        for key, _, count, _ in cases:
            row = ctx.record.measure(ms[key], lambda k=key: sessions_of(inputs[k]), lambda r: f"{r[0]:,} sessions")
            ensure(row[1] == count, f"{key}: the sessions hold {row[1]} of {count} events")
            ms[key].details = {"sessions": row[0]}
    for events in inputs.values():
        events.unpersist()


def stage_contract(ctx: BenchContext) -> None:
    """C0 / C1: the contract check alone, on ``--contract-events`` records of the produced mix (kept
    in Parquet, no Kafka): today's Variant SQL check before the Java one
    (``benchmarks/variant_contract.py``), then the Java check (``spark_jobs.validation``). Each
    repetition reads the records and checks them all (a no-op write), so both pay the same read;
    the records on which the two differ in any column are counted (the target is none)."""
    from pyspark.sql import functions as F

    from benchmarks.variant_contract import variant_parse_records
    from spark_jobs.pipelines import EVENTS_CONTRACT
    from spark_jobs.validation import parse_records
    from tidemark.producer import ProduceSpec, generate

    o = ctx.options
    n = o.contract_events
    spec = ProduceSpec(
        count=n,
        entities=o.entities,
        duplicate_rate=o.duplicate_rate,
        late_rate=o.late_rate,
        malformed_rate=o.malformed_rate,
        seed=o.seed,
    )
    path = str(ctx.work / "contract-records.parquet")
    started = time.perf_counter()
    rows = (("bench", i % o.partitions, i, r.key, r.value) for i, r in enumerate(generate(spec)))
    schema = "topic string, partition int, offset long, key binary, value binary"
    ctx.spark.createDataFrame(list(rows), schema).withColumn("timestamp", F.current_timestamp()).write.parquet(path)
    seconds = time.perf_counter() - started
    ctx.record.progress(f"contract: {n:,} records written to Parquet in {seconds:.1f} s (not measured)")
    raw = ctx.spark.read.parquet(path)
    variant = variant_parse_records(raw)
    java = parse_records(raw, EVENTS_CONTRACT)
    checks = (("C0", "Variant SQL check (before)", variant), ("C1", "Java check", java))
    ms = {key: ctx.record.measurement(key, label, n, unit="records") for key, label, _ in checks}

    def check_all(frame: DataFrame) -> None:
        frame.write.format("noop").mode("overwrite").save()

    for _ in range(o.warmup):
        for _, _, frame in checks:
            check_all(frame)
    for _ in range(o.repeat):
        for key, _, frame in checks:
            ctx.record.measure(ms[key], lambda f=frame: check_all(f))
    columns = ("event_id", "entity_id", "event_type", "event_time", "properties", "quarantine_reason")
    before = variant.select("offset", *[F.col(c).alias(f"b_{c}") for c in columns])
    same = [F.col(f"b_{c}").eqNullSafe(F.col(c)) for c in columns]
    joined = before.join(java, "offset", "full_outer")
    differ = joined.where(~functools.reduce(operator.and_, same)).count()
    ms["C1"].details = {"records_classified_differently": differ}
    ensure(differ == 0, f"contract: the Java check and the Variant check differ on {differ} of {n} records")


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


# Soak runs are seconds apart, not 15 minutes: the session rules shrink with them, so sessions end
# within a few runs as they do in production (a 30-minute gap over 15-minute runs).
SOAK_RULES_GAP = timedelta(seconds=10)
SOAK_RULES_MAX = timedelta(minutes=5)
SOAK_WINDOW = 50  # runs at each end whose medians are compared


def stage_soak(ctx: BenchContext) -> None:
    """S: ``--soak-batches`` scheduled runs of ``--soak-events`` new events each into one sink (months
    of 15-minute runs, compressed), the maintenance DAG's work after every ``--soak-maintenance-every``
    runs (not timed). The last runs' median must be within 1.2x of the first's, and each table's file
    count bounded (the targets in ``figures``)."""
    from spark_jobs import ingest
    from spark_jobs.contract import TABLE_SCHEMAS, SessionRules
    from spark_jobs.maintenance import live_files, maintain

    o = ctx.options
    topic = f"bench-{ctx.run_id}-soak"
    sink = ctx.new_sink("soak", topic)
    settings = replace(sink.settings, session_rules=SessionRules(SOAK_RULES_GAP, SOAK_RULES_MAX))
    m = ctx.record.measurement("S", f"soak: a scheduled run of {o.soak_events:,} new events", o.soak_events)
    files: list[dict[str, int]] = []  # live files of each table before each maintenance
    maintenance_seconds: list[float] = []
    steps: list[dict[str, float]] = []  # each run's time per writer step (summed over its batches)
    for run in range(o.soak_batches):
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
        steps.append({step: sum(r.seconds.get(step, 0.0) for r in results) for step in names})
        if (run + 1) % o.soak_maintenance_every == 0:
            files.append({name: live_files(ctx.spark, settings.table_path(name)) for name in TABLE_SCHEMAS})
            started = time.perf_counter()
            maintain(ctx.spark, settings)
            maintenance_seconds.append(round(time.perf_counter() - started, 2))
            ctx.record.progress(
                f"S maintenance after run {run + 1}: {maintenance_seconds[-1]:.1f} s; files {files[-1]}"
            )
    window = min(SOAK_WINDOW, max(1, len(m.seconds) // 2))
    m.details = {
        "runs": len(m.seconds),
        "window": window,
        "first_median_seconds": median(m.seconds[:window]),
        "last_median_seconds": median(m.seconds[-window:]),
        "files_before_maintenance": files,
        "files_at_end": {name: live_files(ctx.spark, settings.table_path(name)) for name in TABLE_SCHEMAS},
        "maintenance_seconds": maintenance_seconds,
        # Which step grows: the median of each writer step over consecutive windows of runs.
        # "run" is the whole scheduled run; what the steps leave of it is the stream's own work.
        "step_medians_by_window": [
            {
                "runs": f"{i + 1}-{min(i + window, len(steps))}",
                "run": round(median(m.seconds[i : i + window]), 3),
                **{step: round(median([s.get(step, 0.0) for s in steps[i : i + window]]), 3) for step in steps[i]},
            }
            for i in range(0, len(steps), window)
        ],
        "session_rules": {"gap_seconds": SOAK_RULES_GAP.total_seconds(), "max_seconds": SOAK_RULES_MAX.total_seconds()},
    }
    ctx.discard(sink)
