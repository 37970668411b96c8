"""The tidemark page's charts: SVG drawn here, so the page needs no JavaScript and no files beyond itself."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

SERIES_COLOURS = ("#1565c0", "#6a1b9a", "#00838f", "#ef6c00", "#2e7d32", "#ad1457", "#4e342e", "#37474f")


@dataclass(frozen=True)
class Point:
    at: datetime
    value: float


@dataclass(frozen=True)
class Label:
    x: str
    text: str
    anchor: str = ""  # SVG's text-anchor; empty: the start


@dataclass(frozen=True)
class Dot:
    x: str
    y: str
    value: str


@dataclass(frozen=True)
class Series:
    name: str
    colour: str
    points: str  # the polyline's points
    dot: Dot | None  # a series of one sample is a dot (a polyline of one point would draw nothing)


@dataclass(frozen=True)
class Chart:
    """A step chart's geometry, drawn by ``templates/chart.html``."""

    title: str
    width: int
    height: int
    left: int
    right: int
    top: int
    zero_y: str
    top_label: str
    time_labels: list[Label]
    series: list[Series]


def line_chart(title: str, unit: str, series: dict[str, list[Point]], width: int = 640, height: int = 220) -> str:
    """An SVG step chart, one polyline per series, time on x (oldest left): a sample holds until the
    next one (a backlog that stays flat between two samples is drawn flat, not as a slope). A series of
    one sample is a dot."""
    from tidemark_airflow.templating import render

    return render("chart.html", c=chart(title, unit, series, width, height))


def chart(title: str, unit: str, series: dict[str, list[Point]], width: int = 640, height: int = 220) -> Chart:
    """The chart of ``series`` (no series when it has no sample)."""
    points = [p for line in series.values() for p in line]
    if not points:
        return Chart(title, width, height, 0, 0, 0, "0", "", [], [])
    top_label = f"{_number(max(max(p.value for p in points), 1.0))} {unit}".strip()
    left, right, top, bottom = max(56, 12 + 7 * len(top_label)), 12, 10, 28  # room for the whole label
    t0, t1 = min(p.at for p in points).timestamp(), max(p.at for p in points).timestamp()
    v1 = max(max(p.value for p in points), 1.0)

    def x(at: datetime) -> str:
        if t1 == t0:  # one time only: in the middle
            return f"{(left + width - right) / 2:.1f}"
        return f"{left + (at.timestamp() - t0) / (t1 - t0) * (width - left - right):.1f}"

    def y(value: float) -> str:
        return f"{top + (1 - value / v1) * (height - top - bottom):.1f}"

    first, last = f"{datetime.fromtimestamp(t0):%Y-%m-%d %H:%M}", f"{datetime.fromtimestamp(t1):%Y-%m-%d %H:%M}"
    if t1 == t0:
        labels = [Label(x(points[0].at), first, "middle")]
    else:
        labels = [Label(str(left), first), Label(str(width - right), last, "end")]
    drawn = []
    for i, (name, line) in enumerate(sorted(series.items())):
        steps: list[str] = []
        for p in sorted(line, key=lambda p: p.at):
            if steps:  # the previous value holds until this sample
                steps.append(f"{x(p.at)},{steps[-1].split(',')[1]}")
            steps.append(f"{x(p.at)},{y(p.value)}")
        [one, *more] = line
        dot = None if more else Dot(x(one.at), y(one.value), f"{_number(one.value)} {unit}".strip())
        drawn.append(Series(name, SERIES_COLOURS[i % len(SERIES_COLOURS)], " ".join(steps), dot))
    return Chart(title, width, height, left, right, top, y(0), top_label, labels, drawn)


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:,.2f}".rstrip("0").rstrip(".")
