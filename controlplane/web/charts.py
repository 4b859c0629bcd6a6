"""Charts as server-rendered SVG: no script, readable by screen readers (a title and a
description), each series told apart by dash pattern as well as colour, and the same numbers
in a table next to every chart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH = 640
HEIGHT = 220
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 28, 40
# Okabe–Ito colours (distinguishable with the common colour-vision deficiencies), and a dash
# pattern per series so no series is told apart by colour alone.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9")
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4")


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[datetime, float]]


def nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 2.5 or 5 × a power of ten apart)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 12))
    return ticks


def number_label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10_000:
        return f"{value / 1000:,.0f}k"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.3g}"
    return f"{value:.2g}"


def line_chart(
    *, title: str, unit: str, series: Sequence[Series], chart_id: str, floor_zero: bool = True
) -> SafeString:
    """An SVG line chart of ``series`` over time; an empty-data note when none has points."""
    drawn = [s for s in series if s.points]
    title_id, desc_id = f"{chart_id}-title", f"{chart_id}-desc"
    if not drawn:
        return mark_safe(
            f'<p class="empty" id="{escape(chart_id)}">{escape(title)}: no data yet.</p>'
        )
    times = [t.timestamp() for s in drawn for t, _ in s.points]
    values = [v for s in drawn for _, v in s.points if math.isfinite(v)]
    t0, t1 = min(times), max(times)
    if t1 <= t0:
        t0, t1 = t0 - 1800, t1 + 1800
    low = 0.0 if floor_zero else min(values, default=0.0)
    ticks = nice_ticks(low, max(values, default=1.0))
    y0, y1 = ticks[0], ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(ts: float) -> float:
        return LEFT + (ts - t0) / (t1 - t0) * plot_w

    def y(value: float) -> float:
        return TOP + plot_h - (value - y0) / ((y1 - y0) or 1.0) * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-labelledby="{escape(title_id)} {escape(desc_id)}" id="{escape(chart_id)}">',
        f'<title id="{escape(title_id)}">{escape(title)} ({escape(unit)})</title>',
        f'<desc id="{escape(desc_id)}">'
        + escape(
            "; ".join(
                f"{s.label}: {number_label(min(v for _, v in s.points))} to "
                f"{number_label(max(v for _, v in s.points))} {unit}"
                for s in drawn
            )
        )
        + ". The table below the chart holds every value.</desc>",
    ]
    for tick in ticks:
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(tick):.1f}" '
            f'y2="{y(tick):.1f}"/>'
            f'<text class="tick" x="{LEFT - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
            f"{escape(number_label(tick))}</text>"
        )
    span_days = (t1 - t0) / 86400
    fmt = "%m-%d %H:%M" if span_days < 3 else "%Y-%m-%d"
    for i in range(5):
        ts = t0 + (t1 - t0) * i / 4
        label = datetime.fromtimestamp(ts, tz=drawn[0].points[0][0].tzinfo).strftime(fmt)
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        parts.append(
            f'<text class="tick" x="{x(ts):.1f}" y="{HEIGHT - BOTTOM + 16}" '
            f'text-anchor="{anchor}">{escape(label)}</text>'
        )
    parts.append(f'<text class="unit" x="{LEFT}" y="{HEIGHT - 6}">{escape(unit)}</text>')
    legend_x = LEFT + 60
    for index, s in enumerate(drawn):
        colour, dash = COLOURS[index % len(COLOURS)], DASHES[index % len(DASHES)]
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        path = " ".join(
            f"{'M' if j == 0 else 'L'}{x(t.timestamp()):.1f},{y(v):.1f}"
            for j, (t, v) in enumerate(s.points)
            if math.isfinite(v)
        )
        parts.append(
            f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr}/>'
        )
        if len(s.points) <= 60:
            for t, v in s.points:
                parts.append(
                    f'<circle cx="{x(t.timestamp()):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}"/>'
                )
        parts.append(
            f'<line x1="{legend_x}" x2="{legend_x + 22}" y1="{HEIGHT - 10}" y2="{HEIGHT - 10}" '
            f'stroke="{colour}" stroke-width="2"{dash_attr}/>'
            f'<text class="legend" x="{legend_x + 26}" y="{HEIGHT - 6}">{escape(s.label)}</text>'
        )
        legend_x += 34 + 7 * len(s.label)
    parts.append("</svg>")
    return mark_safe("".join(parts))
