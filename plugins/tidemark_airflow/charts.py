"""The tidemark page's charts: SVG drawn here, so the page needs no JavaScript and no files beyond itself."""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import datetime

SERIES_COLOURS = ("#1565c0", "#6a1b9a", "#00838f", "#ef6c00", "#2e7d32", "#ad1457", "#4e342e", "#37474f")


@dataclass(frozen=True)
class Point:
    at: datetime
    value: float


def line_chart(title: str, unit: str, series: dict[str, list[Point]], width: int = 640, height: int = 220) -> str:
    """An SVG step chart, one polyline per series, time on x (oldest left): a sample holds until the
    next one (a backlog that stays flat between two samples is drawn flat, not as a slope). A series of
    one sample is a dot."""
    points = [p for line in series.values() for p in line]
    head = f'<figure class="chart"><figcaption>{html.escape(title)}</figcaption>'
    if not points:
        return head + '<p class="empty">no runs yet</p></figure>'
    top_label = f"{_number(max(max(p.value for p in points), 1.0))} {unit}".strip()
    left, right, top, bottom = max(56, 12 + 7 * len(top_label)), 12, 10, 28  # room for the whole label
    t0, t1 = min(p.at for p in points).timestamp(), max(p.at for p in points).timestamp()
    v1 = max(max(p.value for p in points), 1.0)

    def x(at: datetime) -> float:
        if t1 == t0:  # one time only: in the middle
            return (left + width - right) / 2
        return left + (at.timestamp() - t0) / (t1 - t0) * (width - left - right)

    def y(value: float) -> float:
        return top + (1 - value / v1) * (height - top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" data-chart="{html.escape(title)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f'<line x1="{left}" y1="{y(0):.1f}" x2="{width - right}" y2="{y(0):.1f}" stroke="#999"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(0):.1f}" stroke="#999"/>',
        f'<text x="{left - 6}" y="{top + 4}" text-anchor="end" font-size="11">{html.escape(top_label)}</text>',
        f'<text x="{left - 6}" y="{y(0):.1f}" text-anchor="end" font-size="11">0</text>',
    ]
    if t1 == t0:
        parts.append(
            f'<text x="{x(points[0].at):.1f}" y="{height - 8}" text-anchor="middle" font-size="11">'
            f"{datetime.fromtimestamp(t0):%Y-%m-%d %H:%M}</text>"
        )
    else:
        parts += [
            f'<text x="{left}" y="{height - 8}" font-size="11">{datetime.fromtimestamp(t0):%Y-%m-%d %H:%M}</text>',
            f'<text x="{width - right}" y="{height - 8}" text-anchor="end" font-size="11">'
            f"{datetime.fromtimestamp(t1):%Y-%m-%d %H:%M}</text>",
        ]
    legend = []
    for i, (name, line) in enumerate(sorted(series.items())):
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]
        steps: list[str] = []
        for p in sorted(line, key=lambda p: p.at):
            if steps:  # the previous value holds until this sample
                steps.append(f"{x(p.at):.1f},{steps[-1].split(',')[1]}")
            steps.append(f"{x(p.at):.1f},{y(p.value):.1f}")
        coords = " ".join(steps)
        parts.append(
            f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="2" points="{coords}">'
            f"<title>{html.escape(name)}</title></polyline>"
        )
        if len(line) == 1:  # a polyline of one point draws nothing
            [p] = line
            value = f"{_number(p.value)} {unit}".strip()
            parts.append(
                f'<circle class="sample" cx="{x(p.at):.1f}" cy="{y(p.value):.1f}" r="4" fill="{colour}">'
                f"<title>{html.escape(name)}: {html.escape(value)}</title></circle>"
            )
        legend.append(f'<span style="color:{colour}">&#9632; {html.escape(name)}</span>')
    parts.append("</svg>")
    return head + "".join(parts) + f'<div class="legend">{" ".join(legend)}</div></figure>'


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:,.2f}".rstrip("0").rstrip(".")
