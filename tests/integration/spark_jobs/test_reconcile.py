"""Reconcile and repair against real Kafka, Spark/Delta and PostgreSQL: the tamper drill.

Each test has its own database, lake and topic: reconcile checks everything a database's ledger
holds. Damage is done behind tidemark's back, as an operator's mistake or a bug would: then
reconcile must name it, ``repair`` must fix exactly that, and the next reconcile must pass.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from spark_jobs import db, ingest, reconcile, repair
from spark_jobs.errors import ConfigError
from spark_jobs.offsets import ensure_topic
from spark_jobs.planning import plan_backfill
from spark_jobs.sinks import delta
from spark_jobs.store.findings import SessionsSummary
from tests.integration.spark_jobs.checks import (
    assert_sessions_follow_events,
    crash_at,
    delete_records,
    delta_rows,
    dump_postgres,
    query,
    restore_postgres,
    send,
)
from tidemark.producer import ProduceSpec, produce

pytestmark = pytest.mark.operations  # make test-operations


def reconciled(spark, settings, name: str):
    report = reconcile.run(settings, name, lambda: spark)
    assert report is not None
    return report


def ingest_some(spark, settings, seed: int, count: int = 400) -> None:
    spec = ProduceSpec(
        count=count, entities=12, duplicate_rate=0.05, malformed_rate=0.03, seed=seed, id_prefix=f"s{seed}-"
    )
    produce(settings, spec, topic=settings.topic, partitions=3)
    ingest.run_scheduled(spark, settings, max_offsets_per_trigger=count // 2)


def test_two_reconciles_started_at_once_run_one_after_the_other_and_both_record_their_verdict(spark, fresh) -> None:
    """The DAG's reconcile and an operator's `tidemark reconcile --wait` at the same time: the second
    queues behind the first instead of failing on the first one's writes."""
    import threading

    settings = fresh
    ingest_some(spark, settings, seed=21, count=200)
    reports, errors = {}, []

    def reconcile_as(name: str) -> None:
        try:
            reports[name] = reconcile.run(settings, name, lambda: spark, wait=True)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reconcile_as, args=(name,)) for name in ("dag-run", "operator-run")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    assert {name: report.status for name, report in reports.items()} == {"dag-run": "ok", "operator-run": "ok"}
    assert sorted(query(settings, "SELECT run_id, status FROM reconcile_runs")) == [
        ("dag-run", "ok"),
        ("operator-run", "ok"),
    ]


def versions(spark, settings) -> dict[str, int]:
    return delta.table_versions(spark, settings)


def test_a_clean_run_verifies_every_range_and_the_next_needs_no_spark(spark, fresh) -> None:
    settings = fresh
    ingest_some(spark, settings, seed=1)

    first = reconciled(spark, settings, "first")
    assert first.ok and first.used_spark, first.summary()
    assert first.checks and all(c.reason == "new" and c.outcome == "ok" for c in first.checks)
    assert first.entities_checked == 12  # on a first run, every entity is recomputed from events
    assert query(settings, "SELECT count(*) FROM verified_ranges")[0][0] == len(first.checks)

    # Nothing new: no Spark at all (the Airflow task passes no factory; it would get None back if
    # the run needed Spark).
    second = reconcile.run(settings, "second", spark_factory=None)
    assert second is not None and second.ok and not second.used_spark and second.checks == []
    [(used_spark, status)] = query(settings, "SELECT used_spark, status FROM reconcile_runs WHERE run_id = 'second'")
    assert (used_spark, status) == (False, "ok")

    # Records Kafka has and the sinks do not yet: the lag is measured per partition, and past the
    # threshold the run alerts (consistent, but lagging).
    produce(settings, ProduceSpec(count=100, entities=4, seed=2, id_prefix="late-"), topic=settings.topic)
    lagging = reconcile.run(replace(settings, lag_alert_minutes=0.0001), "lagging", spark_factory=None)
    assert lagging is not None and lagging.consistent and lagging.status == "lagging"
    assert sum(lag.behind_records for lag in lagging.lags) == 100 and len(lagging.lags) == 3
    assert "lag: topic" in lagging.alert() and "tidemark repair" not in lagging.alert()
    assert query(settings, "SELECT sum(behind_records) FROM reconcile_lag WHERE run_id = 'lagging'") == [(100,)]
    within_the_hour = reconcile.run(settings, "not-lagging-yet", spark_factory=None)
    assert within_the_hour is not None and not within_the_hour.lagging  # within the hour

    # New data in the sinks: the same call says it needs Spark and records nothing.
    ingest.run_scheduled(spark, settings)
    assert reconcile.run(settings, "third", spark_factory=None) is None
    assert query(settings, "SELECT count(*) FROM reconcile_runs WHERE run_id = 'third'")[0][0] == 0
    third = reconciled(spark, settings, "third")
    assert third.ok and {c.reason for c in third.checks} == {"new"}
    assert sum(lag.behind_records for lag in third.lags) == 0


def test_the_tamper_drill_each_damage_is_named_repaired_and_rechecked(spark, fresh) -> None:
    settings = fresh
    ingest_some(spark, settings, seed=3)
    ingest_some(spark, settings, seed=4)
    assert reconciled(spark, settings, "baseline").ok

    # (a) rows deleted from PostgreSQL sessions.
    gone = query(
        settings,
        "DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM sessions ORDER BY session_id LIMIT 3) "
        "RETURNING entity_id, session_id",
    )
    found = reconciled(spark, settings, "a")
    assert not found.ok and not found.mismatched
    [difference] = found.differences
    assert difference.kind == "sinks" and difference.session_count == 3
    assert {(e, s) for e, ids in difference.sessions.items() for s in ids} == set(gone)
    before = versions(spark, settings)
    fixed = repair.repair(spark, settings, "a")
    assert fixed.recheck.ok, fixed.describe()
    assert versions(spark, settings) == before, "PostgreSQL was wrong: Delta must not be rewritten"
    assert query(settings, "SELECT count(*) FROM sessions WHERE session_id = ANY(%s)", [s for _, s in gone])[0][0] == 3

    # (b) rows deleted from Delta events (a Delta DELETE): the ranges holding them were verified,
    # the commit tells reconcile to re-check them.
    victims = delta_rows(spark, settings, "events", "partition", "offset", "entity_id")[:2]
    condition = " OR ".join(f"(partition = {v['partition']} AND offset = {v['offset']})" for v in victims)
    delta.table(spark, settings.table_path("events")).delete(condition)
    found = reconciled(spark, settings, "b")
    assert not found.ok
    named = {(c.partition, c.start, c.end) for c in found.mismatched}
    assert all(c.outcome == "missing" and c.reason == "changed" for c in found.mismatched)
    for v in victims:
        assert any(p == v["partition"] and start <= v["offset"] < end for p, start, end in named), (v, named)
    assert {d.kind for d in found.differences} == {"events"}
    assert {v["entity_id"] for v in victims} <= set(found.differences[0].entities)
    ledger_before = query(settings, "SELECT count(*) FROM ledger_ranges")[0][0]
    fixed = repair.repair(spark, settings, "b")
    assert fixed.recheck.ok, fixed.describe()
    repaired = query(
        settings, "SELECT kafka_partition, start_offset, end_offset FROM ledger_ranges WHERE pipeline LIKE 'repair:%%'"
    )
    assert set(repaired) == named, "only the named ranges are re-read"
    assert query(settings, "SELECT count(*) FROM ledger_ranges")[0][0] == ledger_before + len(named)
    assert_sessions_follow_events(spark, settings)

    # (c) one session's event_count changed identically in both sinks: they agree, but not with events.
    [(session_id, entity_id)] = query(settings, "SELECT session_id, entity_id FROM sessions ORDER BY 1 LIMIT 1")
    query(settings, "UPDATE sessions SET event_count = event_count + 1 WHERE session_id = %s", session_id)
    delta.table(spark, settings.table_path("sessions")).update(
        f"session_id = '{session_id}'", {"event_count": "event_count + 1"}
    )
    found = reconciled(spark, settings, "c")
    # Delta's side was summed from the files changed since the previous run: it equals a full read.
    assert found.delta_sessions == SessionsSummary(*delta.sessions_summary(spark, settings))
    assert not found.ok and not found.mismatched
    [difference] = found.differences
    assert difference.kind == "events" and difference.sessions == {entity_id: (session_id,)}
    fixed = repair.repair(spark, settings, "c")
    assert fixed.recheck.ok, fixed.describe()
    assert any("sessions of 1 entities recomputed" in a for a in fixed.actions)
    assert_sessions_follow_events(spark, settings)

    # (d) a ledger batch removed: its offsets are a gap between scheduled batches.
    pipeline = f"ingest:{settings.topic}"
    [(middle,)] = query(
        settings, "SELECT batch_id FROM ledger_batches WHERE pipeline = %s ORDER BY batch_id LIMIT 1 OFFSET 1", pipeline
    )
    lost = query(
        settings,
        "SELECT kafka_partition, start_offset, end_offset FROM ledger_ranges "
        "WHERE pipeline = %s AND batch_id = %s AND end_offset > start_offset",
        pipeline,
        middle,
    )
    query(settings, "DELETE FROM ledger_batches WHERE pipeline = %s AND batch_id = %s", pipeline, middle)
    found = reconciled(spark, settings, "d")
    assert not found.ok
    assert {(g.partition, g.start, g.end) for g in found.gaps} == set(lost)
    before = versions(spark, settings)
    fixed = repair.repair(spark, settings, "d")
    assert fixed.recheck.ok, fixed.describe()
    assert versions(spark, settings) == before, "the records were all there: nothing is rewritten"

    # A passing run has nothing to repair: said before any work.
    with pytest.raises(ConfigError, match="found nothing to repair"):
        repair.load_plan(settings, fixed.recheck.run_id)


def test_a_range_whose_start_retention_removed_before_verification_is_reported_expired(
    spark, fresh, monkeypatch, capsys
) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    settings = fresh
    produce(settings, ProduceSpec(count=120, entities=3, seed=9, id_prefix="x-"), topic=settings.topic, partitions=1)
    ingest.run_scheduled(spark, settings)
    admin = AdminClient(settings.kafka_client_config())
    for future in admin.delete_records([TopicPartition(settings.topic, 0, 50)]).values():
        future.result(timeout=30)

    report = reconciled(spark, settings, "expired")
    assert report.ok, report.summary()  # not a mismatch
    [expired] = report.expired
    assert (expired.start, expired.end, expired.low_watermark) == (0, 120, 50)
    assert "expired: topic" in report.summary() and "removed offsets [0, 50)" in report.summary()
    [(outcome,)] = query(settings, "SELECT outcome FROM reconcile_ranges WHERE run_id = 'expired'")
    assert outcome == "expired"

    # The same from the command line: exit 0 (expired is not a finding), the stored report, and a
    # repair that has nothing to repair says so (exit 2) before starting anything.
    from tidemark import cli

    for key, value in settings.to_env().items():
        monkeypatch.setenv(key, value)
    assert cli.main(["reconcile", "--run-id", "from-the-cli"]) == 0
    assert ": OK: " in capsys.readouterr().out
    assert cli.main(["reconcile", "--show", "expired"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tidemark reconcile expired: OK") and "expired: topic" in out
    assert cli.main(["repair"]) == 2
    assert "no reconcile run found a mismatch" in capsys.readouterr().err

    # What the sinks held at that first check is the range's baseline: a row deleted since is found.
    events = delta.table(spark, settings.table_path("events"))
    [row] = events.toDF().where("offset >= 50").orderBy("offset").limit(1).collect()
    events.delete(f"offset = {row['offset']}")
    damaged = reconcile.run(replace(settings, reverify_days=1e-9), "after-damage", lambda: spark)
    assert [c.outcome for c in damaged.mismatched] == ["missing"], damaged.summary()


def test_damage_a_count_or_a_millisecond_hides_is_found_and_repaired(spark, fresh) -> None:
    """Three kinds of damage the checks missed: a session time a microsecond off in one sink (the
    checksums compared milliseconds), a session only PostgreSQL holds (the rebuild took its entities
    from Delta only, so repair never removed it), and a record held twice beside a missing one in a
    new range (the first check counted rows, so the damage became the verified baseline)."""
    from spark_jobs.rebuild import recompute_sessions
    from spark_jobs.store.lock import single_writer

    settings = fresh
    ingest_some(spark, settings, seed=5, count=200)
    assert reconciled(spark, settings, "clean").ok

    # (a) a microsecond, in PostgreSQL only
    [(session_id, entity_id)] = query(
        settings,
        "UPDATE sessions SET ended_at = ended_at + interval '1 microsecond' "
        "WHERE session_id = (SELECT min(session_id) FROM sessions) RETURNING session_id, entity_id",
    )
    found = reconciled(spark, settings, "a")
    assert not found.ok and [d.kind for d in found.differences] == ["sinks"]
    assert found.differences[0].sessions == {entity_id: (session_id,)}
    assert repair.repair(spark, settings, "a").recheck.ok

    # (b) a session of an entity Delta does not know
    stray = (
        "INSERT INTO sessions (session_id, entity_id, started_at, ended_at, first_event_time, last_event_time, "
        "event_count, duration_seconds) VALUES (%s, %s, '2026-01-01T00:00:00Z', '2026-01-01T00:01:00Z', "
        "'2026-01-01T00:00:00Z', '2026-01-01T00:01:00Z', 2, 60)"
    )
    query(settings, stray, "f" * 32, "nobody-in-delta")
    found = reconciled(spark, settings, "b")
    assert not found.ok and [d.kind for d in found.differences] == ["sinks"]
    assert found.differences[0].sessions == {"nobody-in-delta": ("f" * 32,)}
    fixed = repair.repair(spark, settings, "b")
    assert fixed.recheck.ok, fixed.describe()
    assert query(settings, "SELECT count(*) FROM sessions WHERE entity_id = 'nobody-in-delta'") == [(0,)]
    # A rebuild of every entity (new session rules, or a finding too large to name) removes them too.
    query(settings, stray, "e" * 32, "nobody-in-delta-either")
    with single_writer(settings, "test") as lease:
        recompute_sessions(spark, settings, lease)
    assert query(settings, "SELECT count(*) FROM sessions WHERE entity_id = 'nobody-in-delta-either'") == [(0,)]

    # (c) in a range not verified yet: one record twice, another missing
    produce(settings, ProduceSpec(count=100, entities=12, seed=8, id_prefix="s8-"), topic=settings.topic)
    ingest.run_scheduled(spark, settings)
    events = settings.table_path("events")
    [(p, start, end)] = query(
        settings,
        "SELECT kafka_partition, start_offset, end_offset FROM ledger_ranges "
        "WHERE NOT EXISTS (SELECT 1 FROM verified_ranges AS v WHERE v.pipeline = ledger_ranges.pipeline "
        "AND v.batch_id = ledger_ranges.batch_id AND v.kafka_partition = ledger_ranges.kafka_partition) "
        "ORDER BY end_offset - start_offset DESC LIMIT 1",
    )
    in_range = f"partition = {p} AND offset >= {start} AND offset < {end}"
    table = delta.table(spark, events)
    doubled, missing = [r["offset"] for r in table.toDF().where(in_range).orderBy("offset").take(2)]
    table.toDF().where(f"partition = {p} AND offset = {doubled}").write.format("delta").mode("append").save(events)
    table.delete(f"partition = {p} AND offset = {missing}")
    found = reconciled(spark, settings, "c")
    assert not found.ok
    [bad] = [c for c in found.checks if not c.matches]
    assert (bad.partition, bad.start, bad.end, bad.outcome, bad.reason) == (p, start, end, "extra", "new")
    assert "1 rows beyond one per offset, 1 offsets held by none" in found.summary()
    verified = "SELECT count(*) FROM verified_ranges WHERE kafka_partition = %s AND start_offset = %s"
    assert query(settings, verified, p, start) == [(0,)], "a damaged range is not verified"
    fixed = repair.repair(spark, settings, "c")
    assert fixed.recheck.ok, fixed.describe()
    offsets = [r["offset"] for r in delta.table(spark, events).toDF().where(in_range).collect()]
    assert offsets.count(doubled) == 1 and missing in offsets


T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def one_entity(i: int) -> dict:
    at = (T0 + timedelta(minutes=i)).isoformat()
    return {"event_id": f"e{i}", "entity_id": "one", "event_type": "view", "event_time": at}


def five_events_of_one_entity(spark, settings) -> None:
    """e0..e4 of one entity, arriving a minute apart, in a one-partition CreateTime topic; ingested
    and verified."""
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    send(settings, settings.topic, [one_entity(i) for i in range(5)], [T0 + timedelta(minutes=i) for i in range(5)])
    ingest.run_scheduled(spark, settings)
    assert reconciled(spark, settings, "verified").ok


def test_a_takeover_by_a_later_batch_moves_the_verified_baseline_and_tampering_is_still_found(spark, fresh) -> None:
    """An earlier copy of e2 arrives after e0..e4 were verified: the next batch moves the stored e2
    from events to duplicates. A recorded batch did that, so reconcile stays green on every run;
    damage done after it is still found."""
    settings = fresh
    five_events_of_one_entity(spark, settings)
    send(settings, settings.topic, [one_entity(2)], [T0 - timedelta(minutes=1)])
    [takeover] = ingest.run_scheduled(spark, settings)
    assert (takeover.read, takeover.accepted) == (1, 1)
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "duplicates")) == [2]

    for name in ("after-takeover", "again"):
        report = reconciled(spark, settings, name)
        assert report.ok, report.summary()
        assert query(settings, "SELECT count(*) FROM range_moves") == [(0,)], "the batch is in the ledger"
    delta.table(spark, settings.table_path("events")).update("offset = 4", {"event_type": "'tampered'"})
    found = reconciled(spark, settings, "tampered")
    assert [(c.start, c.end, c.outcome) for c in found.mismatched] == [(0, 5, "changed")], found.summary()


def test_a_repair_takes_what_it_rewrote_as_the_baseline_when_a_restore_lost_a_takeovers_mark(
    spark, fresh, tmp_path
) -> None:
    """The takeover batch crashed after its Delta writes and PostgreSQL was restored to a dump taken
    before it: the move's mark is gone, the retry finds the takeover done already, and reconcile
    finds the range changed. The repair rewrites the range from Kafka, and what it wrote is the new
    baseline: its re-check and every later run are green (found by the model test, seed 5001)."""
    settings = fresh
    five_events_of_one_entity(spark, settings)
    send(settings, settings.topic, [one_entity(2)], [T0 - timedelta(minutes=1)])
    dump = tmp_path / "before-takeover.sql"
    dump_postgres(settings, dump)
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at("after_delta"))
    restore_postgres(settings, dump)
    ingest.run_scheduled(spark, settings)
    found = reconciled(spark, settings, "after-restore")
    assert [(c.start, c.end, c.outcome) for c in found.mismatched] == [(0, 5, "changed")], found.summary()

    fixed = repair.repair(spark, settings, "after-restore")
    assert fixed.recheck.ok, fixed.describe()
    assert reconciled(spark, settings, "later").ok
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "duplicates")) == [2]
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "events")) == [0, 1, 3, 4, 5]
    assert_sessions_follow_events(spark, settings)


def test_a_takeover_retried_after_its_events_write_never_ran_counts_each_offset_once(spark, fresh) -> None:
    """A backfill stored e0 and e1; the scheduled batch over [0, 5) brings an earlier copy of e1 (a
    takeover of a row inside its own range) and a malformed record, and crashes at its quarantine
    write. Its duplicates write committed the displaced e1 while events, written last, still holds
    it: the retry must count that offset once, not refuse the batch as read twice (found by the
    model test, seed 7022)."""
    settings = fresh
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    records = [one_entity(0), one_entity(1), one_entity(2), one_entity(1), {"entity_id": "one"}]
    minutes = [0, 1, 2, -1, 3]
    send(settings, settings.topic, records, [T0 + timedelta(minutes=m) for m in minutes])
    ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={0: (0, 2)}))
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at("write:quarantine"))

    [retried] = ingest.run_scheduled(spark, settings)
    assert (retried.read, retried.accepted, retried.duplicates, retried.quarantined) == (5, 3, 1, 1), retried
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "events")) == [0, 2, 3]
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "duplicates")) == [1]
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "quarantine")) == [4]
    assert_sessions_follow_events(spark, settings)
    assert reconciled(spark, settings, "after-retry").ok


@pytest.mark.parametrize("restored", [False, True], ids=["", "postgresql restored"])
def test_a_takeover_whose_earlier_copy_retention_removed_before_the_retry_leaves_the_stored_row_once(
    spark, fresh, tmp_path, restored
) -> None:
    """e0..e4 verified; the next batch brings an earlier copy of e2 and a new e5, and crashes before
    its events write: its duplicates write committed the displaced e2 (offset 2) while events still
    holds it. Retention then removes the earlier copy (offset 5) before the retry, which cannot take
    over any more: e2 stays in events, so the copy the crashed attempt moved to duplicates must go,
    and offset 5 is recorded as lost. Also when PostgreSQL was restored to a dump taken before the
    takeover, which lacks its attempt (found by the model test, fresh seed 7449)."""
    settings = fresh
    five_events_of_one_entity(spark, settings)
    dump = tmp_path / "before-takeover.sql"
    dump_postgres(settings, dump)
    send(
        settings, settings.topic, [one_entity(2), one_entity(5)], [T0 - timedelta(minutes=1), T0 + timedelta(minutes=5)]
    )
    with pytest.raises(Exception, match="injected crash"):
        ingest.run_scheduled(spark, settings, fault=crash_at("write:events"))
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "duplicates")) == [2], "the move began"
    if restored:
        restore_postgres(settings, dump)
    delete_records(settings, 0, 6)

    [retried] = ingest.run_scheduled(spark, settings, allow_data_loss=True)
    assert (retried.read, retried.accepted, retried.duplicates) == (1, 1, 0), retried
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "events")) == [0, 1, 2, 3, 4, 6]
    assert delta_rows(spark, settings, "duplicates") == []
    assert query(settings, "SELECT start_offset, end_offset FROM retention_losses") == [(5, 6)]
    assert_sessions_follow_events(spark, settings)
    report = reconciled(spark, settings, "after-retry")
    assert report.ok, report.summary()


def test_a_repair_never_deletes_rows_it_cannot_read_again(spark, fresh) -> None:
    """A changed range whose first offsets retention removed since: the repair rewrites only what
    Kafka still holds, keeps the rest as it is and says so."""
    settings = fresh
    five_events_of_one_entity(spark, settings)
    delta.table(spark, settings.table_path("events")).update("offset = 4", {"event_type": "'tampered'"})
    found = reconciled(spark, settings, "tampered")
    assert [c.outcome for c in found.mismatched] == ["changed"]
    delete_records(settings, 0, 3)

    fixed = repair.repair(spark, settings, "tampered")
    assert sorted(r["offset"] for r in delta_rows(spark, settings, "events")) == [0, 1, 2, 3, 4]
    assert {r["event_type"] for r in delta_rows(spark, settings, "events")} == {"view"}
    assert any("offsets [0, 3) are gone" in a and "kept" in a for a in fixed.actions), fixed.describe()
    assert fixed.recheck.ok, fixed.describe()
    assert_sessions_follow_events(spark, settings)


def test_a_repair_that_rewrites_quarantined_records_counts_them_once(spark, fresh) -> None:
    """A changed range that holds a quarantined record: the repair clears the range and quarantines
    the record again, and `tidemark quarantine` still counts it once (found by the model test, seed
    8800: a repair counted the records it rewrote a second time)."""
    settings = fresh
    ensure_topic(settings, settings.topic, partitions=1, timestamp_type="CreateTime")
    malformed = {"event_id": "m2", "entity_id": "one"}  # no event_type, no event_time
    events = [one_entity(0), one_entity(1), malformed, one_entity(3), one_entity(4)]
    send(settings, settings.topic, events, [T0 + timedelta(minutes=i) for i in range(5)])
    ingest.run_scheduled(spark, settings)
    assert reconciled(spark, settings, "verified").ok
    before = tidemark(settings, "quarantine")
    assert before.returncode == 0 and quarantined_per_reason(before.stdout) == [1], before.stdout + before.stderr

    delta.table(spark, settings.table_path("events")).update("offset = 4", {"event_type": "'tampered'"})
    assert [c.outcome for c in reconciled(spark, settings, "tampered").mismatched] == ["changed"]
    fixed = repair.repair(spark, settings, "tampered")
    assert fixed.recheck.ok and any("cleared" in a for a in fixed.actions), fixed.describe()
    assert [r["offset"] for r in delta_rows(spark, settings, "quarantine")] == [2]
    after = tidemark(settings, "quarantine")
    assert after.returncode == 0 and quarantined_per_reason(after.stdout) == [1], after.stdout + after.stderr


def quarantined_per_reason(listing: str) -> list[int]:
    """The records column of `tidemark quarantine`'s table (one line per reason under its rule)."""
    table = listing.split("\n\n")[0].splitlines()[2:]
    return [int(line.split()[0].replace(",", "")) for line in table]


def test_a_repair_rechecks_each_finding_and_leaves_one_that_no_longer_holds(spark, fresh) -> None:
    """A finding fixed since (here the tampering undone with Delta's RESTORE): the repair re-checks
    what it would touch, rewrites nothing, and says so; without a run id it finds the same run."""
    settings = fresh
    five_events_of_one_entity(spark, settings)
    events = delta.table(spark, settings.table_path("events"))
    untampered = events.history(1).first()["version"]
    events.update("offset = 4", {"event_type": "'tampered'"})
    assert [c.outcome for c in reconciled(spark, settings, "tampered").mismatched] == ["changed"]
    events.restoreToVersion(untampered)

    before = versions(spark, settings)
    fixed = repair.repair(spark, settings)
    assert fixed.plan.run_id == "tampered"
    assert versions(spark, settings) == before, "a finding that no longer holds is not repaired"
    assert any("no longer holds" in a for a in fixed.actions), fixed.describe()
    assert fixed.recheck.ok, fixed.describe()


def tidemark(settings, *args: str):
    """The installed ``tidemark`` script, as an operator runs it, against ``settings``."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    script = shutil.which("tidemark", path=str(Path(sys.executable).parent))
    assert script is not None, "no tidemark script beside this Python"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TIDEMARK_")}, **settings.to_env()}
    return subprocess.run([script, *args], env=env, capture_output=True, text=True, timeout=300)


def open_findings(settings) -> list[tuple]:
    return query(settings, "SELECT finding_id, finding_key FROM findings WHERE closed_at IS NULL ORDER BY 1")


def test_a_finding_stays_open_until_a_repairs_recheck_closes_it_and_a_run_that_checked_nothing_says_so(
    spark, fresh
) -> None:
    """Rows deleted from Delta ``events``; the next ingest brings nothing new and its reconcile
    checks nothing: it must stay red (verdict, CLI, exit codes, coverage), not turn green."""
    from spark_jobs.store import history

    settings = fresh
    ingest_some(spark, settings, seed=21)
    assert reconciled(spark, settings, "baseline").ok
    victims = delta_rows(spark, settings, "events", "partition", "offset")[:3]
    delta.table(spark, settings.table_path("events")).delete(
        " OR ".join(f"(partition = {v['partition']} AND offset = {v['offset']})" for v in victims)
    )
    found = reconciled(spark, settings, "found")
    assert found.status == "mismatch" and found.mismatched and found.opened == len(open_findings(settings))
    opened = open_findings(settings)
    damaged = {(c.topic, c.partition) for c in found.mismatched}

    # The next scheduled ingest: nothing new. Its reconcile needs no Spark and checks nothing.
    ingest.run_scheduled(spark, settings)
    quiet = reconcile.run(settings, "nothing-new", spark_factory=None)
    assert quiet is not None and not quiet.used_spark and not quiet.checks
    n = len(opened)
    assert quiet.status == "mismatch", quiet.summary()
    assert f"MISMATCH: nothing new; {n} open finding{'s' if n > 1 else ''} from earlier runs" in quiet.headline()
    assert {f["finding_id"] for f in quiet.carried} == {i for i, _ in opened}
    assert "still open: #" in quiet.alert()

    # What the operator looks at: the stored report and the CLI's exit codes, and the coverage.
    shown = tidemark(settings, "reconcile", "--show")
    assert shown.returncode == 1 and shown.stdout.startswith("tidemark reconcile nothing-new: MISMATCH: nothing new")
    again = tidemark(settings, "reconcile", "--run-id", "from-the-cli")
    assert again.returncode == 1 and ": MISMATCH: nothing new" in again.stdout, again.stdout + again.stderr
    listed = tidemark(settings, "findings")
    assert listed.returncode == 1, listed.stdout + listed.stderr
    for finding_id, _ in opened:
        assert f"- #{finding_id} (open since run found): " in listed.stdout, listed.stdout
    with db.transaction(settings.postgres_dsn) as cur:
        coverage = history.coverage(cur)
    for topic, partition, offsets, verified, *_, open_here in coverage:
        if (topic, partition) in damaged:
            assert verified < offsets and open_here >= 1, coverage
        else:
            assert verified == offsets, coverage

    # New records: a run with Spark checks the open ranges again and finds them, as the same findings.
    ingest_some(spark, settings, seed=22)
    later = reconciled(spark, settings, "later")
    assert later.status == "mismatch" and later.opened == 0 and open_findings(settings) == opened

    # The repair of the latest run (whose findings hold every open one) closes them by its re-check.
    fixed = repair.repair(spark, settings)
    assert fixed.plan.run_id == "later" and fixed.recheck.ok, fixed.describe()
    assert open_findings(settings) == []
    closed = query(settings, "SELECT DISTINCT closed_by, closed_why FROM findings")
    assert closed == [(fixed.recheck.run_id, "the repair's re-check found it fixed")]
    assert tidemark(settings, "findings").returncode == 0
    after = reconcile.run(settings, "after", spark_factory=None)
    assert after is not None and after.ok


def test_a_finding_no_repair_can_fix_stays_open_until_an_operator_acknowledges_it(spark, fresh) -> None:
    """A range missing records whose offsets retention removed since: the repair cannot read them
    again, so the finding stays open (as expired) until `tidemark findings --acknowledge` closes it."""
    settings = fresh
    five_events_of_one_entity(spark, settings)
    assert reconciled(spark, settings, "baseline").ok
    delta.table(spark, settings.table_path("events")).delete("offset = 1")
    assert [c.outcome for c in reconciled(spark, settings, "found").mismatched] == ["missing"]
    [(finding_id, _)] = [f for f in open_findings(settings) if f[1].startswith("range ")]
    delete_records(settings, 0, 5)

    fixed = repair.repair(spark, settings, "found")
    assert fixed.recheck.status == "mismatch", fixed.describe()
    assert [c.outcome for c in fixed.recheck.mismatched] == ["missing"], fixed.describe()
    assert finding_id in [i for i, _ in open_findings(settings)]
    assert "--acknowledge" in fixed.recheck.summary()

    refused = tidemark(settings, "findings", "--acknowledge", str(finding_id))
    assert refused.returncode == 2 and "--reason" in refused.stderr and len(refused.stderr.splitlines()) == 1
    unknown = tidemark(settings, "findings", "--acknowledge", "999999", "--reason", "x")
    assert unknown.returncode == 2 and "no open finding #999999" in unknown.stderr, unknown.stderr
    done = tidemark(settings, "findings", "--acknowledge", str(finding_id), "--reason", "offset 1 lost for good")
    assert done.returncode == 0 and f"acknowledged #{finding_id}" in done.stdout, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("no open findings")
    [(closed_by, why)] = query(settings, "SELECT closed_by, closed_why FROM findings WHERE finding_id = %s", finding_id)
    assert closed_by.startswith("acknowledged by ") and why == "acknowledged: offset 1 lost for good"
    assert reconcile.run(settings, "after", lambda: spark).ok


def test_coverage_counts_each_offset_once_however_many_ranges_read_it(spark, fresh) -> None:
    """A backfill replays offsets an ingest read: the partition still has 5 offsets, all verified."""
    from spark_jobs.store import history

    settings = fresh
    five_events_of_one_entity(spark, settings)
    ingest.run_backfill(spark, settings, plan_backfill(settings, settings.topic, offsets={0: (0, 5)}))
    assert reconciled(spark, settings, "after-the-replay").ok
    with db.transaction(settings.postgres_dsn) as cur:
        assert history.coverage(cur) == [(settings.topic, 0, 5, 5, 2, 2, 0)]
