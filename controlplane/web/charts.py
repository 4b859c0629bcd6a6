"""Charts as server-rendered SVG: no script, readable by screen readers (a title and a
description), each series told apart by dash pattern and marker shape as well as colour, and
the same numbers in a table next to every chart.

What a chart draws is what was measured: every series has a legend entry (laid out in rows
below the plot, wrapping, clear of the axis unit label), points are marked where a series has
few of them, a line never bridges a gap wider than the series' own spacing, step data (a value
that holds until the next one) is drawn as steps, and a latency with an objective carries the
objective as a horizontal line with the points above it ringed and counted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

# The viewBox: the SVG has no width of its own and scales to its container (CSS sets
# ``width: 100%``); 480 units wide keeps 12-unit text at 10 px on a 400 px screen.
WIDTH = 480
LEFT, RIGHT, TOP = 52, 14, 26
PLOT_HEIGHT = 150
TICK_GAP = 16  # below the plot: the time ticks
LEGEND_ROW = 18
LEGEND_SWATCH = 22
CHAR_WIDTH = 6.6  # a generous estimate of one character of legend text at font-size 12
# Okabe–Ito colours (distinguishable with the common colour-vision deficiencies), and a dash
# pattern and a marker shape per series so no series is told apart by colour alone.
COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9")
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4")
MARKERS = ("circle", "square", "triangle", "diamond")
THRESHOLD_COLOUR = "#b00020"
FEW_POINTS = 12  # fewer points than this: every point gets a marker
GAP_FACTOR = 1.5  # a gap wider than this many times the series' spacing breaks its line


@dataclass(frozen=True)
class Series:
    """One line. ``step``: each value holds until the next (drawn horizontal, then vertical;
    the last holds to the chart's end). ``max_gap``: the widest gap the line may bridge (a
    longer one breaks it); unset, it is ``GAP_FACTOR`` × the median spacing of the points
    (with fewer than three points there is no spacing to judge by, and they are joined)."""

    label: str
    points: Sequence[tuple[datetime, float]]
    step: bool = False
    max_gap: timedelta | None = None


@dataclass(frozen=True)
class Threshold:
    """A horizontal objective line; points above it are breaches (``label``: "SLO 2.5 s")."""

    value: float
    label: str


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


def segments(s: Series) -> list[list[tuple[float, float]]]:
    """The runs of ``s``'s finite points (as (timestamp, value)) that a line may join: a
    non-finite value or a gap wider than the series allows starts a new run. A step series'
    value holds until the next, so only a non-finite value breaks it."""
    points = sorted((t.timestamp(), v) for t, v in s.points)
    if s.max_gap is not None:
        limit = s.max_gap.total_seconds()
    elif len(points) >= 3:
        spacing = statistics.median(b[0] - a[0] for a, b in pairwise(points))
        limit = GAP_FACTOR * spacing
    else:
        limit = math.inf
    runs: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for ts, value in points:
        if not math.isfinite(value):
            if current:
                runs.append(current)
            current = []
            continue
        if current and not s.step and ts - current[-1][0] > limit:
            runs.append(current)
            current = []
        current.append((ts, value))
    if current:
        runs.append(current)
    return runs


def legend_rows(labels: Sequence[str], width: float) -> list[list[tuple[float, int]]]:
    """Legend entries laid out left to right in rows no wider than ``width``: per row, each
    entry's x offset and index in ``labels``. An entry too long for a row has a row of its
    own."""
    rows: list[list[tuple[float, int]]] = [[]]
    x = 0.0
    for index, label in enumerate(labels):
        entry = LEGEND_SWATCH + 6 + CHAR_WIDTH * len(label)
        if rows[-1] and x + entry > width:
            rows.append([])
            x = 0.0
        rows[-1].append((x, index))
        x += entry + 14
    return rows


def _marker(shape: str, cx: float, cy: float, colour: str, size: float = 3.2) -> str:
    if shape == "square":
        return (
            f'<rect class="marker" x="{cx - size:.1f}" y="{cy - size:.1f}" width="{2 * size:.1f}" '
            f'height="{2 * size:.1f}" fill="{colour}"/>'
        )
    if shape == "triangle":
        return (
            f'<path class="marker" d="M{cx:.1f},{cy - size - 0.6:.1f} L{cx + size:.1f},'
            f'{cy + size:.1f} L{cx - size:.1f},{cy + size:.1f} Z" fill="{colour}"/>'
        )
    if shape == "diamond":
        return (
            f'<path class="marker" d="M{cx:.1f},{cy - size - 0.8:.1f} L{cx + size + 0.8:.1f},'
            f"{cy:.1f} L{cx:.1f},{cy + size + 0.8:.1f} L{cx - size - 0.8:.1f},{cy:.1f} Z"
            f'" fill="{colour}"/>'
        )
    return f'<circle class="marker" cx="{cx:.1f}" cy="{cy:.1f}" r="{size:.1f}" fill="{colour}"/>'


def breaches(series: Sequence[Series], threshold: Threshold | None) -> int:
    """How many finite points of ``series`` lie above ``threshold``."""
    if threshold is None:
        return 0
    return sum(1 for s in series for _, v in s.points if math.isfinite(v) and v > threshold.value)


def line_chart(
    *,
    title: str,
    unit: str,
    series: Sequence[Series],
    chart_id: str,
    floor_zero: bool = True,
    threshold: Threshold | None = None,
) -> SafeString:
    """An SVG line chart of ``series`` over time; an empty-data note when none has points.

    Every series has a legend entry (one without points says "no data"); ``threshold`` adds
    a horizontal line, rings the points above it and counts them in the description."""
    drawn = [s for s in series if any(math.isfinite(v) for _, v in s.points)]
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
    low = 0.0 if floor_zero else min(values)
    high = max(values)
    if threshold is not None:
        low, high = min(low, threshold.value), max(high, threshold.value)
    ticks = nice_ticks(low, high)
    y0, y1 = ticks[0], ticks[-1]
    plot_w = WIDTH - LEFT - RIGHT
    plot_bottom = TOP + PLOT_HEIGHT

    styles = [
        (COLOURS[i % len(COLOURS)], DASHES[i % len(DASHES)], MARKERS[i % len(MARKERS)])
        for i in range(len(series))
    ]
    has_data = [any(math.isfinite(v) for _, v in s.points) for s in series]
    over = breaches(drawn, threshold)
    # Legend entries: (label, swatch) — every series, then the threshold and its breaches.
    entries: list[tuple[str, str]] = []
    for s, (colour, dash, shape), data in zip(series, styles, has_data, strict=True):
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        entries.append(
            (
                s.label if data else f"{s.label} (no data)",
                f'<line x1="0" x2="{LEGEND_SWATCH}" y1="0" y2="0" stroke="{colour}" '
                f'stroke-width="2"{dash_attr}/>' + _marker(shape, LEGEND_SWATCH / 2, 0, colour),
            )
        )
    if threshold is not None:
        entries.append(
            (
                threshold.label,
                f'<line x1="0" x2="{LEGEND_SWATCH}" y1="0" y2="0" stroke="{THRESHOLD_COLOUR}" '
                'stroke-width="1.5" stroke-dasharray="5 3"/>',
            )
        )
        if over:
            entries.append(
                (
                    f"above {threshold.label} ({over})",
                    f'<circle cx="{LEGEND_SWATCH / 2}" cy="0" r="6" fill="none" '
                    f'stroke="{THRESHOLD_COLOUR}" stroke-width="2"/>',
                )
            )
    labels = [label for label, _ in entries]
    rows = legend_rows(labels, WIDTH - 16)
    legend_top = plot_bottom + TICK_GAP + 10
    height = legend_top + LEGEND_ROW * len(rows) + 4

    def x(ts: float) -> float:
        return LEFT + (ts - t0) / (t1 - t0) * plot_w

    def y(value: float) -> float:
        return plot_bottom - (value - y0) / ((y1 - y0) or 1.0) * PLOT_HEIGHT

    def summary(s: Series) -> str:
        finite = [v for _, v in s.points if math.isfinite(v)]
        return (
            f"{s.label}: {len(finite)} point{'s' if len(finite) != 1 else ''}, "
            f"{number_label(min(finite))} to {number_label(max(finite))} {unit}"
        )

    description = "; ".join(summary(s) for s in drawn)
    missing = [s.label for s, data in zip(series, has_data, strict=True) if not data]
    if missing:
        description += f"; no data for {', '.join(missing)}"
    if threshold is not None:
        total = sum(1 for s in drawn for _, v in s.points if math.isfinite(v))
        description += (
            f". {threshold.label}: {over} of {total} point{'s' if total != 1 else ''} above it"
        )
    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" preserveAspectRatio="xMinYMin meet" '
        f'role="img" aria-labelledby="{escape(title_id)} {escape(desc_id)}" '
        f'id="{escape(chart_id)}" data-breaches="{over}">',
        f'<title id="{escape(title_id)}">{escape(title)} ({escape(unit)})</title>',
        f'<desc id="{escape(desc_id)}">{escape(description)}. '
        "The table beside the chart holds every value.</desc>",
        # The y axis's unit, above its ticks: the legend is below the plot and never meets it.
        f'<text class="unit" x="{LEFT}" y="{TOP - 10}">{escape(unit)}</text>',
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
    tz = drawn[0].points[0][0].tzinfo
    for i in range(4):
        ts = t0 + (t1 - t0) * i / 3
        label = datetime.fromtimestamp(ts, tz=tz).strftime(fmt)
        anchor = "start" if i == 0 else "end" if i == 3 else "middle"
        parts.append(
            f'<text class="tick" x="{x(ts):.1f}" y="{plot_bottom + TICK_GAP}" '
            f'text-anchor="{anchor}">{escape(label)}</text>'
        )
    if threshold is not None:
        ty = y(threshold.value)
        parts.append(
            f'<line class="threshold" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{ty:.1f}" '
            f'y2="{ty:.1f}" stroke="{THRESHOLD_COLOUR}" stroke-width="1.5" '
            f'stroke-dasharray="5 3"/>'
            f'<text class="threshold-label" x="{WIDTH - RIGHT - 2}" y="{ty - 4:.1f}" '
            f'text-anchor="end" fill="{THRESHOLD_COLOUR}">{escape(threshold.label)}</text>'
        )
    for s, (colour, dash, shape), data in zip(series, styles, has_data, strict=True):
        if not data:
            continue
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        runs = segments(s)
        for run in runs:
            if len(run) < 2 and not s.step:
                continue
            path = f"M{x(run[0][0]):.1f},{y(run[0][1]):.1f}"
            for ts, value in run[1:]:
                path += (
                    f" H{x(ts):.1f} V{y(value):.1f}" if s.step else f" L{x(ts):.1f},{y(value):.1f}"
                )
            if s.step and run is runs[-1] and run[-1][0] < t1:
                path += f" H{x(t1):.1f}"
            if path.count(" "):
                parts.append(
                    f'<path class="series" d="{path}" fill="none" stroke="{colour}" '
                    f'stroke-width="2"{dash_attr}/>'
                )
        finite = [p for run in runs for p in run]
        # A point alone in its run has no line through it: it is always marked.
        lone = {run[0] for run in runs if len(run) == 1}
        for ts, value in finite:
            if len(finite) < FEW_POINTS or (ts, value) in lone:
                parts.append(_marker(shape, x(ts), y(value), colour))
            if threshold is not None and value > threshold.value:
                parts.append(
                    f'<circle class="breach" cx="{x(ts):.1f}" cy="{y(value):.1f}" r="6" '
                    f'fill="none" stroke="{THRESHOLD_COLOUR}" stroke-width="2"/>'
                )
    for row_index, row in enumerate(rows):
        ly = legend_top + LEGEND_ROW * row_index
        for offset, index in row:
            label, swatch = entries[index]
            parts.append(
                f'<g class="legend-entry" transform="translate({8 + offset:.1f},{ly})">{swatch}'
                f'<text class="legend" x="{LEGEND_SWATCH + 6}" y="4">{escape(label)}</text></g>'
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))
