"""The tidemark page's SVG charts (no server, no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tidemark_airflow.charts import Point, line_chart

T0 = datetime(2026, 11, 21, 8, tzinfo=UTC)


def test_a_line_chart_draws_a_line_per_series_of_samples_scaled_to_the_largest_value() -> None:
    svg = line_chart("Lag (records)", "records", {"events p0": [Point(T0, 0), Point(T0 + timedelta(hours=1), 50)],
                                                  "events p1": [Point(T0, 100)]})  # fmt: skip
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 1 and 'data-chart="Lag (records)"' in svg
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
    assert two.count("<polyline") == 1, "and no polyline of one point, which would draw nothing"


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
