"""The tidemark page's rendering: charts and tables from reconcile history (no server, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tidemark_airflow.charts import Point, line_chart
from tidemark_airflow.view import Overview, render_overview, render_repair, render_run

T0 = datetime(2026, 11, 21, 8, tzinfo=UTC)


def test_a_line_chart_draws_one_polyline_per_series_scaled_to_the_largest_value() -> None:
    svg = line_chart("Lag (records)", "records", {"events p0": [Point(T0, 0), Point(T0 + timedelta(hours=1), 50)],
                                                  "events p1": [Point(T0, 100)]})  # fmt: skip
    assert svg.count("<polyline") == 2 and 'data-chart="Lag (records)"' in svg
    assert ">100 records</text>" in svg  # the y axis tops at the largest value
    assert "events p0" in svg and "events p1" in svg
    assert "no runs yet" in line_chart("Lag", "min", {})


def test_a_series_of_one_sample_is_drawn_as_a_point() -> None:
    """After a pipeline's first run each chart has one sample per series: a polyline of one point draws
    nothing, so a lone sample is a dot (with its value), in the middle when it is the only time."""
    import re

    alone = line_chart("Records per run", "records", {"accepted": [Point(T0, 40)]})
    [(cx, cy)] = re.findall(r'<circle class="sample" cx="([0-9.]+)" cy="([0-9.]+)"', alone)
    [(left, right)] = re.findall(r'<line x1="([0-9.]+)" y1="[0-9.]+" x2="([0-9.]+)"', alone)[:1]
    assert float(cx) == (float(left) + float(right)) / 2 and float(cy) == 10, alone  # the middle, at the top
    assert "<title>accepted: 40 records</title>" in alone
    assert alone.count(f"{T0.astimezone():%Y-%m-%d %H:%M}</text>") == 1, "one time, said once"
    two = line_chart("Lag", "min", {"p0": [Point(T0, 1), Point(T0 + timedelta(hours=1), 2)], "p1": [Point(T0, 3)]})
    assert two.count('<circle class="sample"') == 1, "only the series of one sample gets a dot"


def test_a_chart_draws_steps_and_keeps_its_axis_label_whole() -> None:
    import re

    hour = timedelta(hours=1)
    svg = line_chart(
        "Lag (records)", "records", {"p0": [Point(T0, 839), Point(T0 + hour, 839), Point(T0 + 2 * hour, 0)]}
    )
    [points] = re.findall(r'<polyline[^>]* points="([^"]+)"', svg)
    xy = [tuple(map(float, p.split(","))) for p in points.split()]
    assert len(xy) == 5 and xy[1][1] == xy[0][1] and xy[3] == (xy[4][0], xy[2][1]), "each value holds until the next"
    [(x, label)] = re.findall(r'<text x="([0-9.]+)" y="14" text-anchor="end" font-size="11">([^<]+)</text>', svg)
    assert label == "839 records" and float(x) >= 6.5 * len(label), "the whole label fits left of the axis"


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
    from spark_jobs.quarantine import ReasonTotal, Sample
    from spark_jobs.runs import Run

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


RANGE_FINDING = {"kind": "range", "outcome": "missing", "pipeline": "ingest:events", "batch_id": 2, "topic": "events",
                 "partition": 0, "start": 10, "end": 20}  # fmt: skip


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


def test_reading_the_pages_takes_the_permission_on_the_tidemark_view() -> None:
    """Airflow's own simple auth manager decides: every role may read, a user without one may not."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from tidemark_airflow.access import may_read

    manager = SimpleAuthManager()
    assert may_read(manager, SimpleAuthManagerUser(username="viewer", role="viewer"))
    assert not may_read(manager, SimpleAuthManagerUser(username="nobody", role=None))


def test_the_metrics_say_each_pipelines_state_in_prometheus_text_format() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tidemark_airflow.metrics import State, exposition

    events = State(
        totals=[("ingest:events", "events", 3, 600, 540, 30, 30, T0), ("backfill:events", "events", 1, 9, 9, 0, 0, T0)],
        lag=[("events", 0, 40, 120.0)],
        verdict=("r2", "mismatch", T0 + timedelta(hours=1)),
        open_findings={"range": 2},
        lost={("events", 1): 120},
    )
    web = State(totals=[("ingest:web", "web", 1, 5, 5, 0, 0, T0)], lag=[("web", 0, 0, 0.0)],
                verdict=("w1", "ok", T0), open_findings={}, lost={}, pipeline="web")  # fmt: skip
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(exposition([events, web]).decode())
        for s in family.samples
    }
    ingest = (("pipeline", "events"), ("run", "ingest"), ("topic", "events"))
    assert samples[("tidemark_records_total", (("outcome", "quarantined"), *ingest))] == 30
    assert samples[("tidemark_records_total", (("outcome", "read"), *ingest))] == 600
    assert samples[("tidemark_batches_total", ingest)] == 3
    assert samples[("tidemark_batches_total", (("pipeline", "events"), ("run", "backfill"), ("topic", "events")))] == 1
    assert samples[("tidemark_last_batch_timestamp_seconds", ingest)] == T0.timestamp()
    assert samples[("tidemark_lag_records", (("partition", "0"), ("pipeline", "events"), ("topic", "events")))] == 40
    assert samples[("tidemark_open_findings", (("kind", "range"), ("pipeline", "events")))] == 2
    assert samples[("tidemark_open_findings", (("kind", "gap"), ("pipeline", "events")))] == 0
    assert samples[("tidemark_verdict", (("pipeline", "events"), ("status", "mismatch")))] == 1
    assert samples[("tidemark_verdict", (("pipeline", "events"), ("status", "ok")))] == 0
    assert (
        samples[("tidemark_lost_offsets_total", (("partition", "1"), ("pipeline", "events"), ("topic", "events")))]
        == 120
    )
    # Each pipeline's series are its own.
    assert samples[("tidemark_verdict", (("pipeline", "web"), ("status", "ok")))] == 1
    assert samples[("tidemark_records_total", (("outcome", "read"), ("pipeline", "web"), ("run", "ingest"),
                                                ("topic", "web")))] == 5  # fmt: skip
    assert samples[("tidemark_open_findings", (("kind", "range"), ("pipeline", "web")))] == 0
    # A partition that lost nothing has its series at 0, so increase() and an alert on it work from the start.
    lost = {labels: v for (name, labels), v in samples.items() if name == "tidemark_lost_offsets_total"}
    assert lost == {
        (("partition", "0"), ("pipeline", "events"), ("topic", "events")): 0,
        (("partition", "1"), ("pipeline", "events"), ("topic", "events")): 120,
        (("partition", "0"), ("pipeline", "web"), ("topic", "web")): 0,
    }


def test_the_metrics_say_what_is_quarantined_now_per_reason() -> None:
    """Net of what readmits brought back, as ``tidemark quarantine`` and the page say: an alert on a
    reason that grows, and a readmit seen to empty it."""
    from prometheus_client.parser import text_string_to_metric_families

    from tidemark_airflow.metrics import State, exposition

    state = State(totals=[], lag=[], verdict=None, open_findings={}, lost={},
                  quarantined={"invalid_json": 3, 'schema: enum at /event: "x"': 12})  # fmt: skip
    families = {f.name: f for f in text_string_to_metric_families(exposition([state]).decode())}
    family = families["tidemark_quarantined_records"]
    assert family.type == "gauge" and "net of readmits" in family.documentation
    assert {s.labels["reason"]: s.value for s in family.samples} == {
        "invalid_json": 3,
        'schema: enum at /event: "x"': 12,
    }
    assert {s.labels["pipeline"] for s in family.samples} == {"events"}


def test_a_scraper_token_is_only_what_tidemark_metrics_token_says(monkeypatch) -> None:
    from tidemark_airflow.app import scraper_token_matches

    monkeypatch.delenv("TIDEMARK_METRICS_TOKEN", raising=False)
    assert not scraper_token_matches("Bearer ") and not scraper_token_matches("")
    monkeypatch.setenv("TIDEMARK_METRICS_TOKEN", "s3cret-scrape")
    assert scraper_token_matches("Bearer s3cret-scrape")
    assert not scraper_token_matches("Bearer s3cret-scrapex") and not scraper_token_matches("s3cret-scrape")


def test_records_are_counted_by_the_runs_that_land_them_and_readmits_and_repairs_only_as_batches() -> None:
    """A readmit's or a repair's batch reads records a record table holds already: counting them among
    ``tidemark_records_total`` would count the same records twice."""
    from prometheus_client.parser import text_string_to_metric_families

    from tidemark_airflow.metrics import State, exposition

    state = State(
        totals=[("ingest:events", "events", 2, 50, 45, 0, 5, T0), ("readmit:events", "events", 1, 40, 5, 0, 35, T0),
                ("repair:events", "events", 1, 30, 30, 0, 0, T0)],
        lag=[], verdict=None, open_findings={}, lost={},
    )  # fmt: skip
    families = {f.name: f for f in text_string_to_metric_families(exposition([state]).decode())}
    records = {(s.labels["run"], s.labels["outcome"]): s.value for s in families["tidemark_records"].samples}
    assert {run for run, _ in records} == {"ingest"} and records[("ingest", "read")] == 50
    assert "scheduled runs and backfills" in families["tidemark_records"].documentation
    batches = {s.labels["run"]: s.value for s in families["tidemark_batches"].samples}
    assert batches == {"ingest": 2, "readmit": 1, "repair": 1}


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


def test_the_metrics_say_whether_the_pipelines_file_and_each_entry_have_problems() -> None:
    """``tidemark_config_ok`` as Prometheus' own ``prometheus_config_last_reload_successful``; a pipeline whose entry
    is broken keeps its series (an alert on the age of its last run fires) beside its problem count."""
    from prometheus_client.parser import text_string_to_metric_families

    from tidemark_airflow.metrics import State, exposition, failed_state
    from tidemark_airflow.pipelines import Unrunnable

    good = State(totals=[], lag=[], verdict=None, open_findings={}, lost={}, pipeline="events")
    broken = State(totals=[], lag=[], verdict=None, open_findings={}, lost={}, pipeline="orders",
                   last_runs=[("ingest:orders", "orders", T0)], problems=("one", "two"))  # fmt: skip
    unread = failed_state(Unrunnable("web", "web", ("three",)), RuntimeError("not migrated"))

    def families(*states, problems=()) -> dict:
        return {f.name: f for f in text_string_to_metric_families(exposition(list(states), problems).decode())}

    found = families(good, broken, unread, problems=["one", "two", "three"])
    assert [s.value for s in found["tidemark_config_ok"].samples] == [0.0]
    assert {s.labels["pipeline"]: s.value for s in found["tidemark_pipeline_problems"].samples} == {
        "events": 0.0, "orders": 2.0, "web": 1.0
    }  # fmt: skip
    assert [(s.labels["pipeline"], s.value) for s in found["tidemark_last_run_timestamp_seconds"].samples] == [
        ("orders", T0.timestamp())
    ]
    assert [s.value for s in families(good)["tidemark_config_ok"].samples] == [1.0]


def test_a_user_sees_only_the_pipelines_whose_dags_airflow_lets_them_read() -> None:
    """Permissions follow the pipeline: the list, and the file's problems that name a pipeline, are cut to what
    the user may read (whatever auth manager says so: the page asks it through is_authorized_dag)."""
    from tidemark_airflow.access import pipeline_access
    from tidemark_airflow.listing import Listing, readable
    from tidemark_airflow.pipelines import Unrunnable

    lines = ["pipelines.yaml: pipeline 'payments': contract.schema: not a JSON Schema", "pipelines.yaml: not valid"]
    listing = Listing(
        [Unrunnable("events", "events", ()), Unrunnable("payments", "payments", (lines[0],))], lines, "p.yaml"
    )

    class AuthManager:  # the one method the page asks, as an auth manager with per-DAG access answers it
        def is_authorized_dag(self, *, method, user, access_entity=None, details=None) -> bool:
            return method == "GET" and details.id in user

    team = pipeline_access(AuthManager(), {"tidemark_ingest", "tidemark_reconcile"})
    seen = readable(listing, team)
    assert [p.name for p in seen.pipelines] == ["events"] and seen.problems == ["pipelines.yaml: not valid"]
    finance = pipeline_access(AuthManager(), {"tidemark_ingest__payments"})
    assert [p.name for p in readable(listing, finance).pipelines] == ["payments"]
    assert readable(listing, lambda name: True) is listing
