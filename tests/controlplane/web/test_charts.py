"""The SVG charts: every series in the legend (in rows clear of the unit label), the objective
line with the points above it ringed and counted, steps for step data, markers where points
are few, and no line across a gap wider than the series' own spacing."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from controlplane.web import charts
from controlplane.web.charts import Series, Threshold, legend_rows, line_chart, segments

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def hourly(values: list[float], start: datetime = T0) -> list[tuple[datetime, float]]:
    return [(start + timedelta(hours=i), v) for i, v in enumerate(values)]


def legend_texts(svg: str) -> list[str]:
    return re.findall(r'<text class="legend"[^>]*>([^<]*)</text>', svg)


def legend_positions(svg: str) -> list[tuple[float, float]]:
    return [
        (float(x), float(y))
        for x, y in re.findall(
            r'<g class="legend-entry" transform="translate\(([\d.]+),([\d.]+)\)"', svg
        )
    ]


def viewbox(svg: str) -> tuple[float, float]:
    match = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg)
    assert match
    return float(match.group(1)), float(match.group(2))


def test_every_series_has_a_legend_entry_even_with_many_and_one_without_points() -> None:
    series = [Series(f"p{q} model-{q}@region-{q}", hourly([q, q + 1, q + 2])) for q in range(9)]
    series.append(Series("mean", []))
    svg = str(line_chart(title="Load", unit="requests/s", series=series, chart_id="c"))
    assert legend_texts(svg) == [s.label for s in series[:-1]] + ["mean (no data)"]
    positions = legend_positions(svg)
    width, height = viewbox(svg)
    # Wrapped into several rows, every entry inside the drawing.
    assert len({y for _, y in positions}) > 1
    assert all(
        x + charts.LEGEND_SWATCH + 6 + charts.CHAR_WIDTH * len(label) <= width and y < height
        for (x, y), label in zip(positions, legend_texts(svg), strict=True)
    )
    assert "no data for mean" in svg


def test_legend_rows_are_below_the_plot_and_the_unit_label_above_it() -> None:
    svg = str(
        line_chart(
            title="Load",
            unit="requests/s",
            series=[Series("peak", hourly([1, 2, 3])), Series("mean", hourly([0.5, 1, 2]))],
            chart_id="c",
        )
    )
    unit = re.search(r'<text class="unit" x="[\d.]+" y="([\d.]+)">requests/s</text>', svg)
    assert unit is not None
    plot_bottom = charts.TOP + charts.PLOT_HEIGHT
    assert float(unit.group(1)) < charts.TOP
    assert all(y > plot_bottom + charts.TICK_GAP for _, y in legend_positions(svg))


def test_legend_rows_wrap_at_the_width() -> None:
    rows = legend_rows(["a" * 20, "b" * 20, "c" * 20, "d" * 80], 400)
    assert [[index for _, index in row] for row in rows] == [[0, 1], [2], [3]]


def test_the_svg_scales_to_its_container() -> None:
    svg = str(line_chart(title="T", unit="s", series=[Series("a", hourly([1, 2]))], chart_id="c"))
    opening = svg[: svg.index(">")]
    assert "viewBox=" in opening and " width=" not in opening and " height=" not in opening


def test_the_slo_line_is_drawn_and_points_above_it_are_ringed_and_counted() -> None:
    svg = str(
        line_chart(
            title="Time to first token, p95",
            unit="seconds",
            series=[Series("p95", hourly([1.2, 3.94, 2.0, 2.7]))],
            chart_id="ttft",
            threshold=Threshold(2.5, "SLO 2.5 s"),
        )
    )
    assert '<line class="threshold"' in svg and ">SLO 2.5 s</text>" in svg
    assert svg.count('class="breach"') == 2
    assert 'data-breaches="2"' in svg
    assert "SLO 2.5 s: 2 of 4 points above it" in svg
    assert legend_texts(svg) == ["p95", "SLO 2.5 s", "above SLO 2.5 s (2)"]


def test_the_slo_line_is_inside_the_plot_when_every_point_is_below_it() -> None:
    svg = str(
        line_chart(
            title="TTFT",
            unit="seconds",
            series=[Series("p95", hourly([0.2, 0.3]))],
            chart_id="ttft",
            threshold=Threshold(2.5, "SLO 2.5 s"),
        )
    )
    line = re.search(r'<line class="threshold" x1="[\d.]+" x2="[\d.]+" y1="([\d.]+)"', svg)
    assert line is not None
    assert charts.TOP <= float(line.group(1)) <= charts.TOP + charts.PLOT_HEIGHT
    assert 'class="breach"' not in svg and "0 of 2 points above it" in svg


def test_step_data_is_drawn_horizontal_then_vertical() -> None:
    svg = str(
        line_chart(
            title="Replicas",
            unit="replicas",
            series=[
                Series("replicas", hourly([4, 6, 5]), step=True),
                Series("demand", hourly([3, 4, 4, 5])),
            ],
            chart_id="r",
        )
    )
    path = re.search(r'<path class="series" d="([^"]+)"', svg)
    assert path is not None
    commands = re.findall(r"[MLHV]", path.group(1))
    # The last value holds to the chart's end (the other series's last point).
    assert commands == ["M", "H", "V", "H", "V", "H"]
    assert "L" not in path.group(1)


def test_few_points_are_all_marked_many_are_not() -> None:
    few = str(line_chart(title="T", unit="s", series=[Series("a", hourly([1, 2]))], chart_id="c"))
    many = str(
        line_chart(title="T", unit="s", series=[Series("a", hourly([1.0] * 30))], chart_id="c")
    )
    # The legend swatch carries one marker too.
    assert few.count('class="marker"') == 2 + 1
    assert many.count('class="marker"') == 1


def test_a_gap_wider_than_the_spacing_breaks_the_line_and_marks_the_lone_point() -> None:
    points = [
        *hourly([1, 2, 3, 4]),
        (T0 + timedelta(hours=30), 5.0),
        *hourly([1] * 12, T0 + timedelta(hours=40)),
    ]
    runs = segments(Series("a", points))
    assert [len(r) for r in runs] == [4, 1, 12]
    svg = str(line_chart(title="T", unit="s", series=[Series("a", points)], chart_id="c"))
    assert svg.count('<path class="series"') == 2  # the lone point has no line ...
    assert svg.count('class="marker"') == 1 + 1  # ... but a marker (plus the legend's)


def test_two_windows_a_day_apart_are_not_joined_when_the_window_length_is_known() -> None:
    points = [(T0, 1.0), (T0 + timedelta(hours=24), 3.0)]
    joined = str(line_chart(title="T", unit="s", series=[Series("a", points)], chart_id="c"))
    assert joined.count('<path class="series"') == 1
    apart = str(
        line_chart(
            title="T",
            unit="s",
            series=[Series("a", points, max_gap=timedelta(minutes=90))],
            chart_id="c",
        )
    )
    assert '<path class="series"' not in apart
    assert apart.count('class="marker"') == 2 + 1


def test_no_points_is_a_note_not_a_chart() -> None:
    html = str(line_chart(title="T", unit="s", series=[Series("a", [])], chart_id="c"))
    assert "<svg" not in html and "T: no data yet." in html


def test_title_and_description_stay_and_series_differ_by_dash() -> None:
    svg = str(
        line_chart(
            title="Load",
            unit="requests/s",
            series=[Series("peak", hourly([1, 2])), Series("mean", hourly([1, 1]))],
            chart_id="load",
        )
    )
    assert '<title id="load-title">Load (requests/s)</title>' in svg
    assert 'aria-labelledby="load-title load-desc"' in svg
    assert "peak: 2 points, 1 to 2 requests/s; mean: 2 points, 1 to 1 requests/s" in svg
    dashes = re.findall(
        r'<path class="series" d="[^"]+" fill="none" stroke="[^"]+" stroke-width="2"( stroke-dasharray="[^"]+")?',
        svg,
    )
    assert len(set(dashes)) == 2
