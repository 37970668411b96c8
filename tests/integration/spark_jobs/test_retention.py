"""Records Kafka's retention removed before tidemark read them, against the real broker, Spark and PostgreSQL.

Retention (here: the admin API's delete-records, which moves the low watermark the same way) can
remove records a pipeline has not read yet: before its first run, between two runs, or inside an
arrival-time range a backfill asks for. Each must fail before any work, naming the offsets; an
acknowledged loss is recorded in the ledger and reconcile reports it, never as a mismatch and
never silently.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from spark_jobs import ingest, reconcile
from spark_jobs.errors import DataLossError
from spark_jobs.offsets import first_arrival, watermarks
from spark_jobs.planning import plan_backfill
from tests.integration.spark_jobs.checks import InjectedCrash, delete_records, delta_rows, query, recreate_topic
from tidemark.producer import ProduceSpec, produce

pytestmark = pytest.mark.operations  # make test-operations


def test_records_removed_before_the_first_run_fail_it_until_acknowledged_then_reconcile_reports_them(
    spark, fresh
) -> None:
    settings = fresh
    produce(settings, ProduceSpec(count=300, entities=8, seed=3, id_prefix="r-"), topic=settings.topic, partitions=2)
    held = watermarks(settings, settings.topic)
    cut = held[0][1] // 2
    assert cut > 0 and held[1][1] > 0
    delete_records(settings, 0, cut)

    lost = rf"partition 0 offsets \[0, {cut}\) were removed by Kafka's retention before the first run"
    with pytest.raises(DataLossError, match=rf"{lost}.*nothing was written.*--allow-data-loss"):
        ingest.run_scheduled(spark, settings)
    # Nothing was written: no ledger row, no recorded start, no lake.
    assert query(settings, "SELECT count(*) FROM ledger_batches")[0][0] == 0
    assert query(settings, "SELECT count(*) FROM pipeline_starts")[0][0] == 0
    assert not Path(settings.lake_root).exists()

    results = ingest.run_scheduled(spark, settings, allow_data_loss=True)
    assert sum(r.read for r in results) == held[0][1] - cut + held[1][1]
    pipeline = f"ingest:{settings.topic}"
    # Where the first run started, and the broker's low watermark then; partition 1 started at 0.
    assert query(settings, "SELECT kafka_partition, start_offset, low_watermark FROM pipeline_starts ORDER BY 1") == [
        (0, cut, cut),
        (1, 0, 0),
    ]
    assert query(
        settings, "SELECT pipeline, kafka_partition, start_offset, end_offset, before_first_run FROM retention_losses"
    ) == [(pipeline, 0, 0, cut, True)]

    report = reconcile.run(settings, "after-loss", lambda: spark)
    assert report is not None and report.ok, report.summary()  # reported, not a mismatch
    [loss] = report.losses
    assert (loss.partition, loss.start, loss.end, loss.before_first_run) == (0, 0, cut, True)
    assert f"lost before the first run: topic {settings.topic} partition 0 offsets [0, {cut})" in report.summary()
    assert "1 lost to retention" in report.headline()
    [(status, findings)] = query(settings, "SELECT status, findings FROM reconcile_runs WHERE run_id = 'after-loss'")
    assert status == "ok"
    assert [f for f in findings if f["kind"] == "lost"] == [
        {"kind": "lost", "pipeline": pipeline, "topic": settings.topic, "partition": 0, "start": 0, "end": cut,
         "before_first_run": True, "during_run": False},
    ]  # fmt: skip

    # The tidemark page's coverage table shows the lost offsets next to the ledger's.
    from spark_jobs.db import transaction
    from tidemark_airflow.view import read_overview

    with transaction(settings.postgres_dsn) as cur:
        coverage = read_overview(cur).coverage
    assert [(row[1], row[-1]) for row in coverage] == [(0, cut), (1, 0)]

    # Acknowledged once: the next run needs nothing, and reconcile still says it (not silence).
    assert ingest.run_scheduled(spark, settings) == []
    assert reconcile.run(settings, "later", lambda: spark).losses == report.losses


def test_records_removed_between_runs_fail_the_next_run_until_acknowledged(spark, fresh) -> None:
    settings = fresh
    produce(settings, ProduceSpec(count=100, entities=4, seed=4, id_prefix="a-"), topic=settings.topic, partitions=1)
    [first] = ingest.run_scheduled(spark, settings)
    read_to = first.ranges[0].end
    produce(settings, ProduceSpec(count=100, entities=4, seed=5, id_prefix="b-"), topic=settings.topic, partitions=1)
    high = watermarks(settings, settings.topic)[0][1]
    cut = read_to + (high - read_to) // 2
    delete_records(settings, 0, cut)

    with pytest.raises(
        DataLossError, match=rf"partition 0 offsets \[{read_to}, {cut}\).*since the last run.*allow-data-loss"
    ):
        ingest.run_scheduled(spark, settings)
    assert query(settings, "SELECT count(*) FROM ledger_batches")[0][0] == 1

    [second] = ingest.run_scheduled(spark, settings, allow_data_loss=True)
    # The batch starts where the broker's records do; the lost range is in the ledger instead.
    assert [(r.start, r.end) for r in second.ranges] == [(cut, high)]
    assert second.read == high - cut
    losses = query(settings, "SELECT kafka_partition, start_offset, end_offset, before_first_run FROM retention_losses")
    assert losses == [(0, read_to, cut, False)]
    report = reconcile.run(settings, "between", lambda: spark)
    assert report is not None and report.ok, report.summary()
    assert not report.gaps  # the lost range is not a gap: it is accounted for
    assert f"lost to retention: topic {settings.topic} partition 0 offsets [{read_to}, {cut})" in report.summary()


def test_a_batch_that_started_past_an_acknowledged_loss_and_crashed_once_committed_is_finished_by_the_retry(
    spark, fresh
) -> None:
    """A run acknowledges a loss: Spark's batch starts inside the removed offsets and the writer starts
    it past them. The run crashes after that batch's PostgreSQL commit, before Spark commits it. The
    retry has nothing left to acknowledge (the loss is recorded), and must see the frozen batch as the
    ledger has it, not start it inside the loss again (the ledger would refuse it, on every retry)."""
    settings = fresh
    produce(settings, ProduceSpec(count=11, entities=3, seed=6, id_prefix="a-"), topic=settings.topic, partitions=1)
    ingest.run_scheduled(spark, settings, max_offsets_per_trigger=6)
    produce(settings, ProduceSpec(count=16, entities=3, seed=7, id_prefix="b-"), topic=settings.topic, partitions=1)
    delete_records(settings, 0, 19)  # Spark plans [11, 17) and [17, 23): the second starts inside the loss
    committed = []

    def crash_after_the_second(reached: str) -> None:
        if reached == "after_postgres":
            committed.append(True)
            if len(committed) == 2:
                raise InjectedCrash("injected crash after the second batch's PostgreSQL commit")

    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(
            spark, settings, max_offsets_per_trigger=6, allow_data_loss=True, fault=crash_after_the_second
        )
    pipeline = f"ingest:{settings.topic}"
    ranges = "SELECT start_offset, end_offset FROM ledger_ranges WHERE pipeline = %s AND batch_id = 3"
    assert query(settings, ranges, pipeline) == [(19, 23)]  # the batch Spark froze as [17, 23)

    results = ingest.run_scheduled(spark, settings, max_offsets_per_trigger=6)
    assert [(r.batch_id, r.skipped, [(x.start, x.end) for x in r.ranges]) for r in results] == [
        (3, True, [(19, 23)]),
        (4, False, [(23, 27)]),
    ]
    assert query(settings, "SELECT kafka_partition, start_offset, end_offset FROM retention_losses") == [(0, 11, 19)]
    report = reconcile.run(settings, "after-the-retry", lambda: spark)
    assert report is not None and report.ok, report.summary()
    assert not report.gaps


def test_a_time_range_backfill_fails_when_retention_removed_records_it_may_hold(fresh) -> None:
    settings = fresh
    produce(settings, ProduceSpec(count=200, entities=4, seed=6, id_prefix="t-"), topic=settings.topic, partitions=1)
    delete_records(settings, 0, 50)
    first_kept = first_arrival(settings, settings.topic, 0, 50)
    assert first_kept is not None
    start, end = first_kept - timedelta(hours=1), first_kept + timedelta(hours=1)

    with pytest.raises(
        DataLossError, match=r"partition 0: offsets \[0, 50\) are no longer on the broker.*arrived at.*allow-data-loss"
    ):
        plan_backfill(settings, settings.topic, from_time=start, to_time=end)
    assert [(r.start, r.end) for r in plan_backfill(settings, settings.topic, from_time=start, to_time=end,
                                                    allow_data_loss=True).ranges] == [(50, 200)]  # fmt: skip
    # A range that starts after the first record still held is complete: planned as before.
    later = plan_backfill(settings, settings.topic, from_time=first_kept + timedelta(milliseconds=1), to_time=end)
    assert later.ranges[0].start > 50


def test_a_topic_deleted_and_created_again_under_its_name_is_refused_before_any_work(spark, fresh) -> None:
    """The new topic's offsets start at 0 again: the checkpoint, the ledger and the sinks' rows hold
    the old topic's coordinates. A run, a backfill and reconcile each fail before any work and say
    what happened; nothing of the old topic is overwritten or taken for the new one."""
    from spark_jobs.errors import TopicRecreated

    settings = fresh
    produce(settings, ProduceSpec(count=10, entities=2, seed=4, id_prefix="old-"), topic=settings.topic, partitions=1)
    ingest.run_scheduled(spark, settings)
    assert reconcile.run(settings, "before", lambda: spark).ok
    recreate_topic(settings, partitions=1)
    produce(settings, ProduceSpec(count=5, entities=2, seed=5, id_prefix="new-"), topic=settings.topic, partitions=1)
    old_rows = sorted(tuple(r) for r in delta_rows(spark, settings, "events", "offset", "event_id"))

    recreated = r"topic '.*' was deleted and created again"
    with pytest.raises(TopicRecreated, match=recreated):
        ingest.run_scheduled(spark, settings)
    with pytest.raises(TopicRecreated, match=recreated):
        ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={0: (0, 5)}))
    with pytest.raises(TopicRecreated, match=recreated):
        reconcile.run(settings, "after", lambda: spark)
    assert sorted(tuple(r) for r in delta_rows(spark, settings, "events", "offset", "event_id")) == old_rows
    assert query(settings, "SELECT count(*) FROM ledger_batches") == [(1,)]


def small_fetches(settings):
    """``settings`` whose consumers fetch about one record at a time (and whose producers send one
    per batch): Spark has not fetched the records retention removes while a run reads."""
    tiny = {
        "java.max.partition.fetch.bytes": "400",
        "java.fetch.max.bytes": "400",
        "librdkafka.batch.num.messages": "1",
    }
    return replace(settings, kafka_options={**settings.kafka_options, **tiny})


def test_records_retention_removes_during_a_run_that_acknowledged_a_loss_are_recorded_not_skipped(spark, fresh) -> None:
    """A pipeline catching up behind retention: the run acknowledged [0, 20), so its stream skips
    removed offsets. Retention then removes [20, 70) while it reads in batches of 20: every offset
    ends up in the sinks or in a recorded loss, once, and the run and reconcile say so. (One record
    per producer batch and small fetches: Spark's consumer has not fetched the removed records
    before they go.)"""
    settings = small_fetches(fresh)
    produce(settings, ProduceSpec(count=100, entities=4, seed=7, id_prefix="c-"), topic=settings.topic, partitions=1)
    delete_records(settings, 0, 20)

    def retention_strikes(point: str) -> None:
        if point == "planned" and watermarks(settings, settings.topic)[0][0] < 70:
            delete_records(settings, 0, 70)

    results = ingest.run_scheduled(
        spark, settings, max_offsets_per_trigger=20, allow_data_loss=True, fault=retention_strikes
    )
    held = set()
    for table in ("events", "duplicates", "quarantine"):
        held |= {r["offset"] for r in delta_rows(spark, settings, table, "offset")}
    losses = query(settings, "SELECT start_offset, end_offset, during_run FROM retention_losses ORDER BY 1")
    assert losses[0] == (0, 20, False), "the acknowledged loss, exactly"
    during = [offset for start, end, during_run in losses if during_run for offset in range(start, end)]
    assert during, "retention removed records during the run: a loss must be recorded"
    assert len(during) == len(set(during)) and not set(during) & held and set(during) <= set(range(20, 70))
    assert held | set(during) == set(range(20, 100)), "each offset is held or recorded as lost"
    assert "lost to retention during a run" in ingest.describe(results)

    report = reconcile.run(settings, "caught-up", lambda: spark)
    assert report is not None and not report.gaps, report.summary()
    assert "lost to retention during a run" in report.summary()


def test_retention_during_a_run_that_acknowledged_nothing_fails_it_in_one_line_and_the_next_run_records_the_loss(
    spark, fresh
) -> None:
    """Nothing was lost when the run started, so it acknowledged nothing; retention then removes
    records it has not read yet. The run stops with tidemark's one-line loss error (not Spark's),
    keeps the batches it committed, and the run that acknowledges the loss records it."""
    settings = small_fetches(fresh)
    produce(settings, ProduceSpec(count=60, entities=4, seed=9, id_prefix="u-"), topic=settings.topic, partitions=1)

    def retention_strikes(point: str) -> None:
        if point == "planned" and watermarks(settings, settings.topic)[0][0] < 40:
            delete_records(settings, 0, 40)

    with pytest.raises(DataLossError, match=r"retention removed .* while the run read .*--allow-data-loss"):
        ingest.run_scheduled(spark, settings, max_offsets_per_trigger=20, fault=retention_strikes)
    committed = query(settings, "SELECT sum(end_offset - start_offset) FROM ledger_ranges")[0][0]
    assert committed == 20, "the first batch committed before retention struck"

    results = ingest.run_scheduled(spark, settings, max_offsets_per_trigger=20, allow_data_loss=True)
    held = set()
    for table in ("events", "duplicates", "quarantine"):
        held |= {r["offset"] for r in delta_rows(spark, settings, table, "offset")}
    lost = {o for start, end in query(settings, "SELECT start_offset, end_offset FROM retention_losses")
            for o in range(start, end)}  # fmt: skip
    assert lost == set(range(20, 40)) and held == set(range(20)) | set(range(40, 60)), (sorted(lost), results)


def held_and_lost(spark, settings) -> tuple[dict[str, list[int]], list[int]]:
    """The offsets each record table holds, and the offsets recorded as lost (one partition)."""
    tables = {
        t: [r["offset"] for r in delta_rows(spark, settings, t, "offset")]
        for t in ("events", "duplicates", "quarantine")
    }
    lost = sorted(o for start, end in query(settings, "SELECT start_offset, end_offset FROM retention_losses")
                  for o in range(start, end))  # fmt: skip
    return tables, lost


def assert_each_offset_held_or_lost(tables: dict[str, list[int]], lost: list[int], count: int) -> None:
    """Each of the first ``count`` offsets is held once, or recorded as lost; never both."""
    held = [offset for offsets in tables.values() for offset in offsets]
    assert len(held) == len(set(held)) and not set(held) & set(lost), (tables, lost)
    assert set(held) | set(lost) == set(range(count)), "each offset is held or recorded as lost"


@pytest.mark.parametrize("point", ["write:sessions", "write:events"])
def test_a_batch_that_crashed_part_way_and_lost_its_records_before_the_retry_keeps_what_it_wrote(
    spark, fresh, point
) -> None:
    """A batch crashes between its Delta writes; retention removes its records before the retry.
    What the crashed attempt wrote is held, not lost: the retry that acknowledges the loss records
    as lost only the offsets neither Kafka nor a record table holds, each offset ends up in one
    place, and no session is left of a record no table holds."""
    from tests.integration.spark_jobs.checks import assert_sessions_follow_events, assert_settings_sinks_agree

    settings, prefix = fresh, "partial-"
    produce(settings, ProduceSpec(count=40, entities=30, seed=13, id_prefix=prefix), topic=settings.topic, partitions=1)
    batches = [0]

    def crash_in_the_second_batch(reached: str) -> None:
        if reached == "after_postgres":
            batches[0] += 1
        elif reached == point and batches[0] == 1:
            raise InjectedCrash(f"injected crash {reached}")

    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, max_offsets_per_trigger=20, fault=crash_in_the_second_batch)
    delete_records(settings, 0, 30)
    with pytest.raises(DataLossError):
        ingest.run_scheduled(spark, settings, max_offsets_per_trigger=20)
    ingest.run_scheduled(spark, settings, max_offsets_per_trigger=20, allow_data_loss=True)

    tables, lost = held_and_lost(spark, settings)
    assert_each_offset_held_or_lost(tables, lost, 40)
    removed = set(range(20, 30))
    if point == "write:sessions":  # written last: every record table of the batch committed before the crash
        assert removed <= {o for offsets in tables.values() for o in offsets}, (tables, lost)
    else:  # events never committed: what it would have held is lost
        assert not removed & set(tables["events"]) and removed & set(lost), (tables, lost)
    assert_sessions_follow_events(spark, settings)
    assert_settings_sinks_agree(spark, settings, prefix)
    report = reconcile.run(settings, "after-the-partial-batch", lambda: spark)
    assert report.ok, report.summary()


@pytest.mark.parametrize("cut", ["before the run", "into the committed batch"])
def test_a_loss_is_recorded_once_and_held_records_kept_when_postgresql_was_restored_under_a_crashed_run(
    spark, fresh, tmp_path, cut
) -> None:
    """A run commits batch 0 and crashes in batch 1; PostgreSQL is then restored to a dump taken
    before the run (the ledger lacks batch 0 and any loss the run recorded). Retention removed the
    first offsets before the run (offsets no batch read: fresh seed 7305), or after the crash, into
    batch 0 (records Delta holds: fresh seed 7449). The retry that acknowledges the loss records as
    lost exactly the offsets no record table holds, and keeps the rest."""
    from tests.integration.spark_jobs.checks import dump_postgres, restore_postgres

    settings, prefix = fresh, "restored-loss-"
    produce(settings, ProduceSpec(count=30, entities=4, seed=17, id_prefix=prefix), topic=settings.topic, partitions=1)
    if cut == "before the run":
        delete_records(settings, 0, 4)
    dump = tmp_path / "before-the-run.sql"
    dump_postgres(settings, dump)
    batches = [0]

    def crash_in_the_second_batch(reached: str) -> None:
        if reached == "after_postgres":
            batches[0] += 1
        elif reached == "write:events" and batches[0] == 1:
            raise InjectedCrash(f"injected crash {reached}")

    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(
            spark, settings, max_offsets_per_trigger=10, allow_data_loss=True, fault=crash_in_the_second_batch
        )
    restore_postgres(settings, dump)
    if cut == "into the committed batch":
        delete_records(settings, 0, 5)
    with pytest.raises(DataLossError):
        ingest.run_scheduled(spark, settings, max_offsets_per_trigger=10)
    ingest.run_scheduled(spark, settings, max_offsets_per_trigger=10, allow_data_loss=True)

    tables, lost = held_and_lost(spark, settings)
    held = sorted(o for offsets in tables.values() for o in offsets)
    if cut == "before the run":
        assert (held, lost) == (list(range(4, 30)), [0, 1, 2, 3])
    else:
        assert (held, lost) == (list(range(30)), [])
    report = reconcile.run(settings, "after-the-restore", lambda: spark)
    assert report.ok, report.summary()


def test_a_batch_retried_over_other_ranges_after_a_restore_adds_nothing_its_crashed_attempt_wrote(
    spark, fresh, tmp_path
) -> None:
    """Retention removed offset 10, the next the pipeline needs. A run that acknowledges it plans its
    batch past the loss, [11, 30), and crashes after its record tables' writes; PostgreSQL
    is restored to a dump taken before the run (the loss and the attempt are gone). The retry that
    acknowledges the loss again leaves it to the frozen batch, which it plans as [10, 30): other Delta
    write ids than the crashed attempt's. It must still find what that attempt wrote, not append it
    again (fresh seed 7623)."""
    from tests.integration.spark_jobs.checks import crash_at, dump_postgres, restore_postgres

    settings = fresh
    produce(
        settings, ProduceSpec(count=10, entities=3, seed=23, id_prefix="before-"), topic=settings.topic, partitions=1
    )
    ingest.run_scheduled(spark, settings)
    spec = ProduceSpec(count=20, entities=3, duplicate_rate=0.3, malformed_rate=0.2, seed=29, id_prefix="after-")
    produce(settings, spec, topic=settings.topic, partitions=1)
    delete_records(settings, 0, 11)
    dump = tmp_path / "before-the-run.sql"
    dump_postgres(settings, dump)
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, allow_data_loss=True, fault=crash_at("write:sessions"))
    crashed = held_and_lost(spark, settings)[0]
    assert all(crashed.values()), f"the crashed attempt wrote every record table: {crashed}"
    restore_postgres(settings, dump)

    ingest.run_scheduled(spark, settings, allow_data_loss=True)
    tables, lost = held_and_lost(spark, settings)
    assert_each_offset_held_or_lost(tables, lost, 30)
    assert lost == [10], (tables, lost)
    report = reconcile.run(settings, "after-the-retry", lambda: spark)
    assert report.ok, report.summary()


def test_a_backfill_that_crashed_part_way_and_lost_its_records_before_the_retry_keeps_what_it_wrote(
    spark, fresh
) -> None:
    """The backfill analogue of the scheduled case above: a backfill crashes after its record tables;
    retention removes its oldest records before the operator retries it, acknowledging the loss.
    What the crashed attempt wrote is held and counted, not recorded lost; each offset ends up held
    or lost, never both, and reconcile finds everything accounted for."""
    from tests.integration.spark_jobs.checks import assert_sessions_follow_events, assert_settings_sinks_agree, crash_at

    settings, prefix = fresh, "backfill-partial-"
    produce(settings, ProduceSpec(count=40, entities=30, seed=13, id_prefix=prefix), topic=settings.topic, partitions=1)
    plan = plan_backfill(settings, settings.topic, offsets={0: (0, 40)})
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_backfill(spark, settings, plan, fault=crash_at("write:sessions"))
    delete_records(settings, 0, 30)
    with pytest.raises(DataLossError):
        plan_backfill(settings, settings.topic, offsets={0: (0, 40)})
    ingest.run_backfill(
        spark, settings, plan_backfill(settings, settings.topic, offsets={0: (0, 40)}, allow_data_loss=True)
    )

    tables, lost = held_and_lost(spark, settings)
    assert_each_offset_held_or_lost(tables, lost, 40)
    assert set(tables["events"]) & set(range(30)), "the crashed attempt's events are kept"
    assert_sessions_follow_events(spark, settings)
    assert_settings_sinks_agree(spark, settings, prefix)
    report = reconcile.run(settings, "after-the-partial-backfill", lambda: spark)
    assert report.ok, report.summary()


def test_a_backfill_that_skips_removed_offsets_records_and_prints_exactly_those(spark, fresh) -> None:
    settings = fresh
    produce(settings, ProduceSpec(count=40, entities=4, seed=8, id_prefix="d-"), topic=settings.topic, partitions=1)
    delete_records(settings, 0, 15)

    plan = plan_backfill(settings, settings.topic, offsets={0: (5, 30)}, allow_data_loss=True)
    result = ingest.run_backfill(spark, settings, plan)
    assert result.read == 15
    printed = ingest.describe(result)
    assert f"lost to retention: topic {settings.topic} partition 0 offsets [5, 15)" in printed, printed
    assert query(settings, "SELECT pipeline, start_offset, end_offset, during_run FROM retention_losses") == [
        (f"backfill:{settings.topic}", 5, 15, False)
    ]


def test_a_later_copy_is_never_left_in_duplicates_when_retention_took_its_earlier_copy_before_the_retry(
    spark, fresh
) -> None:
    """One batch holds two copies of an event; the one at the later offset arrived first (a
    CreateTime topic), so it is the events row and the other its duplicate. The attempt crashes at
    its events write; retention removes both before the retry, which acknowledges the loss. The
    duplicate must not be left in ``duplicates`` with no copy of its event in ``events``: nothing
    holds either copy, and both are recorded lost (fresh seed 8012)."""
    from datetime import UTC, datetime

    from spark_jobs.offsets import ensure_topic
    from tests.integration.spark_jobs.checks import assert_sessions_follow_events, crash_at, send_to

    settings = fresh
    ensure_topic(settings, settings.topic, 1, "CreateTime")
    at = datetime(2026, 10, 24, 22, tzinfo=UTC)
    send_to(
        settings,
        settings.topic,
        [
            (0, "u1", "a", at),
            (0, "u2", "twice", at + timedelta(minutes=40)),  # offset 1: arrived later, the duplicate
            (0, "u2", "twice", at + timedelta(minutes=30)),  # offset 2: arrived first, the events row
            (0, "u1", "b", at + timedelta(minutes=50)),
        ],
    )
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at("write:events"))
    delete_records(settings, 0, 3)
    ingest.run_scheduled(spark, settings, allow_data_loss=True)

    tables, lost = held_and_lost(spark, settings)
    assert_each_offset_held_or_lost(tables, lost, 4)
    stored = {r["event_id"] for r in delta_rows(spark, settings, "events", "event_id")}
    copies = {r["event_id"] for r in delta_rows(spark, settings, "duplicates", "event_id")}
    assert copies <= stored, f"duplicates of events no table holds: {copies - stored} ({tables}, lost {lost})"
    assert lost == [0, 1, 2] and tables["events"] == [3], (tables, lost)
    assert_sessions_follow_events(spark, settings)
    report = reconcile.run(settings, "after-the-retry", lambda: spark)
    assert report.ok, report.summary()


def test_a_batch_that_crashed_before_its_quarantine_write_and_lost_those_records_counts_none_of_them(
    spark, fresh
) -> None:
    """A batch records what it quarantines per reason with its attempt, then crashes before its
    quarantine write; retention removes those records before the retry. The retry quarantines
    nothing (they are lost, and no table holds them), so no reason may count them: the totals
    ``tidemark quarantine`` and the tidemark page show are what the quarantine table holds (found by
    the model test, seed 8827)."""
    from spark_jobs.db import transaction
    from spark_jobs.offsets import ensure_topic
    from spark_jobs.store import quarantine
    from tests.integration.spark_jobs.checks import crash_at, send

    settings = fresh
    ensure_topic(settings, settings.topic, partitions=1)
    events = [
        {"event_id": f"q{i}", "entity_id": "one", "event_type": "view", "event_time": "2026-03-01T12:00:00+00:00"}
        for i in range(10)
    ]
    for i in (3, 7):  # no event_type: quarantined
        del events[i]["event_type"]
    send(settings, settings.topic, events)
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at("write:quarantine"))
    assert query(settings, "SELECT sum(records) FROM quarantine_attempts")[0][0] == 2  # recorded, never written
    delete_records(settings, 0, 8)  # both invalid records are gone
    with pytest.raises(DataLossError):
        ingest.run_scheduled(spark, settings)
    [batch] = ingest.run_scheduled(spark, settings, allow_data_loss=True)

    tables, lost = held_and_lost(spark, settings)
    assert tables["quarantine"] == [] and {3, 7} <= set(lost), (tables, lost)
    assert batch.quarantined == 0
    with transaction(settings.pipeline_dsn) as cur:
        totals = quarantine.totals(cur)
    assert totals == [], f"quarantine totals count records the quarantine table does not hold: {totals}"
    assert query(settings, "SELECT count(*) FROM quarantine_attempts")[0][0] == 0
