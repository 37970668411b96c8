"""The tidemark page's rendering: the overview, the pipelines list, the repair form and run reports (no server,
no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tidemark_airflow.view import Overview, render_overview, render_repair, render_run

T0 = datetime(2026, 11, 21, 8, tzinfo=UTC)
RANGE_FINDING = {"kind": "range", "outcome": "missing", "pipeline": "ingest:events", "batch_id": 2, "topic": "events",
                 "partition": 0, "start": 10, "end": 20}  # fmt: skip


def test_the_overview_shows_the_latest_verdict_coverage_findings_and_runs() -> None:
    overview = Overview(
        runs=[
            ("r2", T0 + timedelta(hours=1), "mismatch", 3, 1, True, 7, None, 120.0),
            ("r1", T0, "ok", 5, 0, False, 0, None, 0.0),
        ],
        lag=[(T0, "events", 0, 0, 0.0, 100, 100), (T0 + timedelta(hours=1), "events", 0, 40, 120.0, 100, 140)],
        coverage=[("events", 0, 140, 100, 3, 2, 1, 0), ("events", 1, 30, 30, 1, 1, 0, 120)],
        mismatches=[("r2", T0, "mismatch", "tidemark reconcile r2: MISMATCH <b>", None, None, None)],
        findings=[
            (7, RANGE_FINDING, "r2", T0, "r2", None, None, None),
            (
                6,
                {
                    "kind": "gap",
                    "pipeline": "ingest:events",
                    "topic": "events",
                    "partition": 1,
                    "start": 5,
                    "end": 9,
                    "after_batch": 1,
                    "before_batch": 3,
                },
                "r0",
                T0,
                "r1",
                "r1",
                T0,
                "checked again: fixed",
            ),
        ],  # fmt: skip
    )
    page = render_overview(overview)
    assert 'id="latest-status"' in page and "MISMATCH" in page
    assert page.count("<svg") == 3 and page.count("<polyline") == 3
    assert "<td class=num>140</td><td class=num>100</td>" in page
    assert "<td class=num>1</td><td class=num>1</td><td class=num>0</td><td class=num>120</td>" in page  # lost
    assert "tidemark repair --run-id r2" in page and "&lt;b&gt;" in page  # alert text is escaped
    assert '<a target="_top" href="repair?reconcile_run_id=r2">repair</a>' in page
    assert '<a href="runs/r1">r1</a>' in page
    assert '<span id="open-findings">1</span>' in page
    assert "missing: topic events partition 0 offsets [10, 20) (ingest:events batch 2)" in page
    assert "by r1: checked again: fixed" in page


def test_the_overview_shows_each_ingest_run_and_the_quarantine_by_reason_with_samples() -> None:
    from spark_jobs.store.quarantine import ReasonTotal, Sample
    from spark_jobs.store.runs import Run

    run = Run("u1", "ingest:events", "events", "airflow tidemark_ingest manual__2026-11-21T08:00:00+00:00", T0,
              T0 + timedelta(seconds=40), 2, 1_000, 900, 60, 40, 120, 3)  # fmt: skip
    by_cli = Run("u0", "backfill:events", "events", "cli", T0 - timedelta(hours=1), T0 - timedelta(minutes=59),
                 1, 10, 10, 0, 0, 2, 0)  # fmt: skip
    busy = Run("u2", "ingest:events", "events", "cli", T0 + timedelta(minutes=1), T0 + timedelta(minutes=1), 0, 0, 0,
               0, 0, 0, 0, failure="another run holds the writer lock of <events>")  # fmt: skip
    sample = Sample("events", 0, 17, "2026-11-21T07:59:00.000Z", "u-1", "{not <json>")
    overview = Overview(
        runs=[], lag=[], coverage=[], mismatches=[], ingest_runs=[busy, run, by_cli],
        quarantine=[ReasonTotal("invalid_json", 40, T0, T0)], quarantine_samples={"invalid_json": [sample]},
        quarantine_days=[(T0, "invalid_json", 40)],
    )  # fmt: skip
    page = render_overview(overview)
    assert (
        '<td>ingest</td><td><a target="_top" href="../dags/tidemark_ingest/runs/'
        'manual__2026-11-21T08%3A00%3A00%2B00%3A00">tidemark_ingest manual__2026-11-21T08:00:00+00:00</a></td>'
    ) in page
    assert "<td class=num>1,000</td><td class=num>900</td><td class=num>60</td><td class=num>40</td>" in page
    assert "<td class=num>120</td><td class=num>40.0</td><td class=num>25</td><td>finished</td>" in page  # 40 s
    # A failed run says why, escaped.
    assert ">failed: another run holds the writer lock of &lt;events&gt;</span></td></tr>" in page
    assert "<td>backfill</td><td>cli</td>" in page
    # The run's kind, not the ledger's name for it ("ingest:events"): the section is the pipeline's already.
    assert "<th>run</th><th>started by</th>" in page and "ingest:events" not in page
    assert "<td>invalid_json</td><td class=num>40</td>" in page
    assert (
        "events p0 offset 17 (2026-11-21T07:59:00.000Z): key &#34;u-1&#34;, value &#34;{not &lt;json&gt;&#34;" in page
    )
    assert 'data-chart="Records per run"' in page and 'data-chart="Quarantined per day (last 30 days)"' in page


def test_the_repair_page_shows_the_plan_and_a_form_with_the_run_id_filled_in() -> None:
    page = render_repair("r2", ["repair of reconcile run r2:", "  re-read events[0] [10, 20)"])
    assert 'name="reconcile_run_id" size="60" value="r2"' in page and 'method="post" action="repair"' in page
    assert "re-read events[0] [10, 20)" in page and "tidemark repair --run-id r2" in page
    refused = render_repair(None, [], "cannot repair: no reconcile run found a mismatch: nothing to repair")
    assert 'id="repair-error"' in refused and 'value=""' in refused and "the latest reconcile run" in refused


def test_the_page_lists_every_pipeline_and_a_pipelines_own_page_links_within_it() -> None:
    from tidemark_airflow.pipelines_list import Summary

    summaries = [
        Summary("events", "events", ("r1", "ok", T0), 0, 0, 0.0, 5_557, 5_557),
        Summary("web", "web", ("w2", "mismatch", T0), 2, 839, 150.0, 1_000, 800),
        Summary("orders", "orders", problem="pipeline 'orders' was not migrated: run `tidemark db migrate`"),
    ]
    overview = Overview(
        runs=[("w2", T0, "mismatch", 3, 1, True, 7, None, 120.0)], lag=[], coverage=[],
        mismatches=[("w2", T0, "mismatch", "tidemark reconcile w2: MISMATCH", None, None, None)],
        findings=[(7, RANGE_FINDING, "w2", T0, "w2", None, None, None)], pipeline="web", pipelines=summaries,
    )  # fmt: skip
    page = render_overview(overview)
    # The list: each pipeline's verdict, open findings, lag and coverage, linking to its page.
    assert '<a class="pipeline" href="./">events</a></td><td>events</td>' in page
    assert '<a class="pipeline" href="./?pipeline=web"><b>web</b></a></td><td>web</td>' in page
    assert ">MISMATCH</td><td class=num>2</td><td class=num>839</td><td class=num>2.5</td>" in page
    assert "<td class=num>800 / 1,000</td>" in page and "run `tidemark db migrate`" in page
    # The pipeline's own page: its runs, repair and commands are the pipeline's.
    assert '<h2 id="pipeline">Pipeline web</h2>' in page
    assert '<a href="runs/w2?pipeline=web">w2</a>' in page
    assert 'href="repair?pipeline=web&amp;reconcile_run_id=w2">repair</a>' in page
    assert "tidemark repair --pipeline web --run-id w2" in page
    assert "tidemark findings --pipeline web --acknowledge ID" in page
    form = render_repair("w2", [], pipeline="web")
    assert 'method="post" action="repair?pipeline=web"' in form and "Trigger tidemark_repair__web" in form
    assert '<a href="./?pipeline=web">tidemark</a> / web / repair' in form
    assert '<a href="../?pipeline=web">tidemark</a> / web / w2' in render_run(
        ("w2", "ok", "report"), [], pipeline="web"
    )


def test_a_run_page_shows_its_report_and_ranges_or_says_it_does_not_exist() -> None:
    ranges = [("events", 0, 0, 10, "ingest:events", 0, "new", 10, 10, "ok")]
    page = render_run(("r1", "ok", "tidemark reconcile r1: OK"), ranges)
    assert "tidemark reconcile r1: OK" in page and "[0, 10)" in page and "ingest:events 0" in page
    assert "No such reconcile run" in render_run(None, [])


def test_a_pipelines_file_with_problems_is_a_banner_and_a_broken_pipeline_keeps_its_row() -> None:
    """Each line where the operator looks first; the pipeline whose entry is broken is listed with it."""
    from tidemark_airflow.pipelines_list import Summary

    line = "pipelines.yaml: pipeline 'orders': not valid YAML at line 41, column 1: found unexpected end of stream"
    summaries = [
        Summary("events", "events", ("r1", "ok", T0), 0, 0, 0.0, 10, 10),
        Summary("orders", "orders", ("o1", "ok", T0), problem=f"cannot run: {line}"),
    ]
    page = render_overview(Overview([], [], [], [], pipelines=summaries, file_problems=[line], file="/etc/p.yaml"))
    assert '<div id="file-problems" class="banner"><b>The pipelines file /etc/p.yaml has problems.</b>' in page
    assert f"<li><code>{line}</code></li>" in str(page).replace("&#39;", "'")
    assert '<a class="pipeline" href="./?pipeline=orders">orders</a></td><td>orders</td><td colspan="5">' in page
    assert "cannot run: pipelines.yaml: pipeline &#39;orders&#39;: not valid YAML at line 41" in page
    assert 'id="file-problems"' not in render_overview(Overview([], [], [], [], pipelines=summaries[:1]))
