"""Quarantined records come back after a contract fix, against real Kafka, Spark/Delta and PostgreSQL.

A producer ships a release whose events the contract does not know yet; they are quarantined. The
contract is fixed, a dry run says per reason what would come back, and ``readmit`` brings them back
as if they had been accepted at arrival: an earlier copy of a stored event takes its place, the
entities' sessions are recomputed in both sinks, every offset stays in exactly one record table and
reconcile agrees. A crash after every Delta write (the records have left quarantine) and before the
PostgreSQL commit leaves PostgreSQL's sessions behind; the next readmit writes that batch again,
brings nothing back twice, and counts what came back once. (A crash before the records leave
quarantine, which leaves them in two tables, is the model fuzz's: its fixed seed readmits through a
crash at the sessions' write.)
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from spark_jobs import db, ingest, readmit, reconcile, repair
from spark_jobs.errors import WriterFenced
from spark_jobs.offsets import ensure_topic
from spark_jobs.settings import Settings
from spark_jobs.sinks import delta
from spark_jobs.store import quarantine, runs
from tests.integration.spark_jobs.checks import (
    InjectedCrash,
    assert_offset_coverage,
    assert_sessions_follow_events,
    assert_settings_sinks_agree,
    crash_at,
    delta_rows,
    query,
    take_over_inside,
)
from tests.integration.spark_jobs.test_pipelines import WEB, redeclare, send_web
from tidemark.migrations import migrate_pipelines

pytestmark = pytest.mark.operations  # make test-operations

ENUM = 'schema: enum at /event: does not have a value in the enumeration ["page", "track"]'


def visits(prefix: str) -> Callable[..., dict]:
    """``visit(i, event, user="a", message=None)``: web's record of message ``i`` (or ``message``), i minutes
    after an hour ago."""
    t = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)

    def visit(i: int, event: str, user: str = "a", message: int | None = None) -> dict:
        return {"messageId": f"{prefix}m{i if message is None else message}", "userId": f"{prefix}{user}",
                "timestamp": (t + timedelta(minutes=i)).isoformat(), "event": event}  # fmt: skip

    return visit


def fix_identify(web: Settings) -> None:
    """The fix: "identify" is an event type now (a compatible change of the contract)."""
    schema = json.loads(json.dumps(web.contract().schema))
    schema["properties"]["event"]["enum"].append("identify")
    redeclare(web, schema=schema)


@pytest.fixture
def web(fresh: Settings, tmp_path: Path) -> Settings:
    path = tmp_path / "pipelines.yaml"
    path.write_text(yaml.safe_dump({"pipelines": [{**WEB, "topic": f"web-{uuid.uuid4().hex[:8]}"}]}))
    base = replace(fresh, pipelines_file=path)
    migrate_pipelines(base)
    settings = base.for_pipeline(base.declared("web"))
    ensure_topic(settings, settings.topic, partitions=2)
    return settings


def test_readmit_after_a_contract_fix_brings_records_back_exactly_once_through_a_crash(
    spark, web: Settings, tmp_path: Path
) -> None:
    prefix = f"r{uuid.uuid4().hex[:6]}-"
    visit = visits(prefix)
    send_web(web, [
        visit(0, "page"), visit(1, "identify"), visit(2, "page"),  # the release's new "identify"
        visit(3, "identify", "b"),  # quarantined first copy of m3 ...
        visit(4, "page", "b", message=3),  # ... whose later copy is accepted
        visit(5, "purchase", "b"),  # still unknown after the fix
        "{not json",
    ])  # fmt: skip
    ingest.run_scheduled(spark, web)
    assert sorted(r["reason"][:60] for r in delta_rows(spark, web, "quarantine")) == sorted(
        ["invalid_json", ENUM[:60], ENUM[:60], ENUM[:60]]
    )

    fix_identify(web)

    everything = readmit.Selection()
    dry = readmit.readmit(spark, web, everything, dry_run=True)
    assert [(r.reason[:60], r.quarantined, r.back) for r in dry.reasons] == [(ENUM[:60], 3, 2), ("invalid_json", 1, 0)]
    assert "2 records would come back" in dry.describe()
    assert len(delta_rows(spark, web, "quarantine")) == 4  # a dry run changes nothing

    # A crash once Delta holds the readmit (the records left quarantine), before PostgreSQL's commit.
    with pytest.raises(InjectedCrash):
        readmit.readmit(spark, web, everything, fault=crash_at("after_delta"))
    assert len(delta_rows(spark, web, "quarantine")) == 2
    assert query(web, "SELECT count(*) FROM ledger_batches WHERE left(pipeline, 8) = 'readmit:'") == [(0,)]

    # The next readmit writes that batch again (PostgreSQL's sessions, the ledger), and brings nothing back twice.
    done = readmit.readmit(spark, web, readmit.Selection(reason=ENUM))
    assert [(r.quarantined, r.back) for r in done.reasons] == [(1, 0)]
    assert "finished the readmit that stopped before its ledger commit: ledger batch readmit:" in done.describe()
    events = {r["event_id"]: r for r in delta_rows(spark, web, "events")}
    assert sorted(events) == sorted(f"{prefix}m{i}" for i in range(4))
    assert events[f"{prefix}m3"]["event_type"] == "identify"  # the first arrival took the stored copy's place
    [later] = delta_rows(spark, web, "duplicates")  # the copy stored before moved to duplicates
    assert later["event_id"] == f"{prefix}m3" and later["partition"] == events[f"{prefix}m3"]["partition"]
    assert later["offset"] > events[f"{prefix}m3"]["offset"]
    assert sorted(r["reason"][:60] for r in delta_rows(spark, web, "quarantine")) == ["invalid_json", ENUM[:60]]
    assert_offset_coverage(spark, web, 7)
    assert_sessions_follow_events(spark, web)
    assert_settings_sinks_agree(spark, web, prefix)
    with db.transaction(web.pipeline_dsn) as cur:
        left = {q.reason[:60]: q.records for q in quarantine.totals(cur)}
    # The quarantine's totals no longer count the two that came back, although the second writing of
    # their batch found them gone from quarantine: its attempt recorded what it brings back per reason.
    assert left == {ENUM[:60]: 1, "invalid_json": 1}
    assert [(reason[:60], n) for reason, n in query(web, "SELECT reason, records FROM readmitted_reasons")] == [
        (ENUM[:60], 2)
    ]
    report = reconcile.run(web, "after-readmit", lambda: spark)
    assert report is not None and report.status == "ok", report.findings()

    # Again: nothing left that the contract accepts, nothing written.
    batches = query(web, "SELECT count(*) FROM ledger_batches")
    again = readmit.readmit(spark, web, everything)
    assert again.back == 0 and query(web, "SELECT count(*) FROM ledger_batches") == batches
    assert_offset_coverage(spark, web, 7)


def test_a_repair_first_readmits_the_quarantined_records_of_its_ranges_a_fixed_contract_accepts(
    spark, web: Settings
) -> None:
    """The contract is fixed, and before any readmit reconcile finds a range changed that holds a
    quarantined record the fix accepts. The repair reads the range again with the fixed contract, so
    the record goes to ``events``; it readmits it first, so the quarantine totals stop counting it."""
    prefix = f"q{uuid.uuid4().hex[:6]}-"
    visit = visits(prefix)
    send_web(web, [visit(0, "page"), visit(1, "identify"), visit(2, "page"), "{not json"])
    ingest.run_scheduled(spark, web)
    assert sorted(r["reason"][:60] for r in delta_rows(spark, web, "quarantine")) == ["invalid_json", ENUM[:60]]
    verified = reconcile.run(web, "verified", lambda: spark)  # what a later check compares against
    assert verified is not None and verified.ok, verified
    fix_identify(web)

    delta.table(spark, web.table_path("events")).update(f"event_id = '{prefix}m2'", {"event_type": "'tampered'"})
    report = reconcile.run(web, "tampered", lambda: spark)
    assert report is not None and [c.outcome for c in report.mismatched] == ["changed"], report.findings()
    fixed = repair.repair(spark, web, report.run_id)
    assert fixed.recheck.ok, fixed.describe()
    assert "readmitted first the quarantined records in them that the contract accepts now: 1" in fixed.actions

    events = {r["event_id"]: r["event_type"] for r in delta_rows(spark, web, "events")}
    assert events == {f"{prefix}m0": "page", f"{prefix}m1": "identify", f"{prefix}m2": "page"}
    assert [r["reason"] for r in delta_rows(spark, web, "quarantine")] == ["invalid_json"]
    with db.transaction(web.pipeline_dsn) as cur:
        left = {q.reason[:60]: q.records for q in quarantine.totals(cur)}
    assert left == {"invalid_json": 1}, fixed.describe()
    assert_offset_coverage(spark, web, 4)
    assert_sessions_follow_events(spark, web)
    assert_settings_sinks_agree(spark, web, prefix)


def test_damage_found_before_a_readmit_of_its_range_is_still_repaired_after_it(spark, web: Settings) -> None:
    """Seed 60003 of the model test: reconcile finds an event changed; a readmit (here run by hand; there the
    first, crashed attempt of the repair) then brings back a quarantined record of the same range, which
    marks the range moved. The repair must still rewrite the range from Kafka, not take the damage for the
    range's new baseline ("no longer holds")."""
    prefix = f"q{uuid.uuid4().hex[:6]}-"
    visit = visits(prefix)
    send_web(web, [visit(0, "page"), visit(1, "identify"), visit(2, "page")])
    ingest.run_scheduled(spark, web)
    verified = reconcile.run(web, "verified-60003", lambda: spark)
    assert verified is not None and verified.ok, verified

    delta.table(spark, web.table_path("events")).update(f"event_id = '{prefix}m2'", {"event_type": "'tampered'"})
    report = reconcile.run(web, "tampered-60003", lambda: spark)
    assert report is not None and [c.outcome for c in report.mismatched] == ["changed"], report.findings()
    fix_identify(web)
    assert readmit.readmit(spark, web, readmit.Selection()).back == 1  # the range is moved now
    fixed = repair.repair(spark, web, report.run_id)

    assert fixed.recheck.ok, fixed.describe()
    events = {r["event_id"]: r["event_type"] for r in delta_rows(spark, web, "events")}
    assert events == {f"{prefix}m0": "page", f"{prefix}m1": "identify", f"{prefix}m2": "page"}, fixed.describe()
    assert_offset_coverage(spark, web, 3)
    assert_settings_sinks_agree(spark, web, prefix)


def test_a_readmit_under_session_rules_the_stored_sessions_were_not_cut_with_is_refused_before_its_first_write(
    spark, web: Settings
) -> None:
    """The session rules edited in the pipelines file after the sessions were cut: a batch of the readmit would
    be refused at its PostgreSQL commit, so it is refused before its first Delta write and the sinks agree."""
    from spark_jobs.errors import SessionRulesChanged

    prefix = f"q{uuid.uuid4().hex[:6]}-"
    visit = visits(prefix)
    send_web(web, [visit(0, "page"), visit(1, "identify"), visit(9, "page")])
    ingest.run_scheduled(spark, web)
    fix_identify(web)
    config = yaml.safe_load(web.pipelines_file.read_text())
    config["pipelines"][0]["sessions"] = {"gap_minutes": 60, "max_hours": 1}  # was 5 minutes
    web.pipelines_file.write_text(yaml.safe_dump(config))
    edited = web.for_run()  # what the next run reads from the file

    tables = ("events", "quarantine", "sessions")
    before = {name: sorted(map(tuple, delta_rows(spark, web, name))) for name in tables}
    with pytest.raises(SessionRulesChanged, match="the stored sessions were built with"):
        readmit.readmit(spark, edited, readmit.Selection())
    assert {name: sorted(map(tuple, delta_rows(spark, web, name))) for name in tables} == before
    assert query(web, "SELECT count(*) FROM write_attempts WHERE left(pipeline, 8) = 'readmit:'") == [(0,)]
    assert_settings_sinks_agree(spark, web, prefix)


def test_a_fenced_readmits_write_that_another_readmit_finished_is_in_the_tables_once(spark, web: Settings) -> None:
    """A failover inside a readmit's ``events`` write; a second readmit takes over and finishes the first
    one's batch (the same records, over the same ranges); the fenced readmit's write in flight then adds
    nothing: the batch's writes are named by what they write, not by the readmit that writes them."""
    prefix = f"f{uuid.uuid4().hex[:6]}-"
    visit = visits(prefix)
    send_web(web, [visit(0, "page"), visit(1, "identify"), visit(2, "identify", "b"), visit(3, "page", "b")])
    ingest.run_scheduled(spark, web)
    fix_identify(web)
    second = lambda: readmit.readmit(spark, web, readmit.Selection())  # noqa: E731
    fault, finished = take_over_inside(web, "write:events", second)

    with pytest.raises(WriterFenced):
        readmit.readmit(spark, web, readmit.Selection(), fault=fault)
    assert not isinstance(finished[0], BaseException), f"the second readmit failed: {finished[0]!r}"
    assert "finished the readmit that stopped before its ledger commit" in finished[0].describe()

    offsets = [(r["partition"], r["offset"]) for r in delta_rows(spark, web, "events")]
    assert len(offsets) == len(set(offsets)) == 4, f"a record is in events twice: {sorted(offsets)}"
    assert delta_rows(spark, web, "quarantine") == []
    assert_offset_coverage(spark, web, 4)
    assert_sessions_follow_events(spark, web)
    assert_settings_sinks_agree(spark, web, prefix)


def test_an_unfinished_readmit_is_finished_with_its_own_selection_whatever_the_next_runs_flags_and_contract(
    spark, web: Settings
) -> None:
    """A readmit of one reason stops after ``events`` holds its records and before they leave quarantine.
    The fix is then reverted, and another fixed reason in the same offsets stays fixed. The run that
    finishes the stopped batch selects what that batch selected (its reason), not its own flags nor
    every record in the batch's offsets; the records the stopped batch wrote leave quarantine whatever
    the contract says now (else they would be in two tables), and the other reason's record waits for
    a readmit that selects it."""
    schema = json.loads(json.dumps(web.contract().schema))
    schema["properties"]["properties"]["properties"]["channel"] = {"enum": ["web", "app"]}
    redeclare(web, schema=schema)
    prefix = f"s{uuid.uuid4().hex[:6]}-"
    visit = visits(prefix)
    email = {**visit(2, "page"), "properties": {"channel": "email"}}
    send_web(web, [visit(0, "page"), visit(1, "identify"), email, visit(3, "identify"), visit(4, "page")])
    ingest.run_scheduled(spark, web)
    reasons = sorted(r["reason"] for r in delta_rows(spark, web, "quarantine"))
    [channel] = [r for r in reasons if r != ENUM]
    assert reasons == sorted([ENUM, ENUM, channel]) and "/properties/channel" in channel, reasons

    fixed = json.loads(json.dumps(schema))
    fixed["properties"]["event"]["enum"].append("identify")
    fixed["properties"]["properties"]["properties"]["channel"]["enum"].append("email")
    redeclare(web, schema=fixed)
    with pytest.raises(InjectedCrash):
        readmit.readmit(spark, web, readmit.Selection(reason=ENUM), fault=crash_at("write:quarantine:readmitted"))
    assert len(delta_rows(spark, web, "events")) == 4 and len(delta_rows(spark, web, "quarantine")) == 3

    schema["properties"]["properties"]["properties"]["channel"]["enum"].append("email")  # "identify" reverted
    redeclare(web, schema=schema)
    done = readmit.readmit(spark, web, readmit.Selection(reason="no record has this reason"))
    assert "finished the readmit that stopped before its ledger commit" in done.describe(), done.describe()
    assert [r["reason"] for r in delta_rows(spark, web, "quarantine")] == [channel], done.describe()
    assert sorted(r["event_id"] for r in delta_rows(spark, web, "events")) == [f"{prefix}m{i}" for i in (0, 1, 3, 4)]
    assert_offset_coverage(spark, web, 5)
    assert [(reason, n) for reason, n in query(web, "SELECT reason, records FROM readmitted_reasons")] == [(ENUM, 2)]
    with db.transaction(web.pipeline_dsn) as cur:
        assert {q.reason: q.records for q in quarantine.totals(cur)} == {channel: 1}
    assert_sessions_follow_events(spark, web)
    assert_settings_sinks_agree(spark, web, prefix)
    report = reconcile.run(web, "after-finish", lambda: spark)
    assert report is not None and report.status == "ok", report.findings()

    # The other reason comes back when a readmit selects it.
    again = readmit.readmit(spark, web, readmit.Selection(reason=channel))
    assert again.back == 1 and delta_rows(spark, web, "quarantine") == []
    assert_offset_coverage(spark, web, 5)
    assert_settings_sinks_agree(spark, web, prefix)


def test_a_reason_is_selected_by_its_code_or_its_start_and_one_that_selects_nothing_is_answered_before_spark(
    spark, web: Settings, tmp_path: Path
) -> None:
    """The operator's words: ``tidemark quarantine`` shows each reason's code; ``--reason`` takes the code or
    the start of the reason (not the whole text with the old enum list inside it); a selection of nothing is
    one line naming the reasons there are, before Spark starts (the installed command)."""
    from tests.integration.tidemark.test_errors import NO_SPARK, one_line, tidemark

    prefix = f"c{uuid.uuid4().hex[:6]}-"
    visit = visits(prefix)
    send_web(web, [visit(0, "page"), visit(1, "identify"), visit(2, "identify", user="b")])
    ingest.run_scheduled(spark, web)
    env = web.to_env() | {"TIDEMARK_PIPELINE": "web"}

    listed = tidemark(["quarantine", "--limit", "0"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, _, row = listed.stdout.splitlines()[:3]
    assert header.split()[:3] == ["records", "code", "reason"], header
    assert row.split()[:4] == ["2", "schema", "schema:", "enum"], row

    line = one_line(tidemark(["readmit", "--reason", "schema: enum at /status"], env | NO_SPARK, tmp_path))
    assert line == (
        "tidemark readmit: --reason 'schema: enum at /status' selects no record quarantined now in pipeline 'web': "
        "give a reason's code (the text before its ':'; now schema) or the start of a reason as `tidemark "
        f"quarantine` lists it. Quarantined now: {ENUM} (2)"
    ), line

    fix_identify(web)
    for wanted in ("schema", "schema: enum at /event", ENUM):
        counted = readmit.readmit(spark, web, readmit.Selection(reason=wanted), dry_run=True)
        assert [(r.reason, r.quarantined, r.back) for r in counted.reasons] == [(ENUM, 2, 2)], wanted
    nothing = readmit.readmit(spark, web, readmit.Selection(reason="schem"), dry_run=True)  # neither code nor ':'
    assert nothing.reasons == []

    # The readmit is a row of the runs table (the page's), with what it checked again and brought back; the dry
    # runs changed nothing and are none.
    assert readmit.readmit(spark, web, readmit.Selection(reason="schema")).back == 2
    with db.transaction(web.pipeline_dsn) as cur:
        latest = runs.recent(cur, 10)
    assert [(r.pipeline, r.records_read, r.accepted, r.quarantined, r.failure) for r in latest] == [
        (f"readmit:{web.topic}", 2, 2, 0, None),
        (f"ingest:{web.topic}", 3, 1, 2, None),
    ]
