"""Geometry of the dashboard's small SVG charts, computed here so the templates only draw rectangles and lines.

Plain numbers in, plain numbers out: no plotting library, nothing fetched by the browser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

HISTOGRAM_BINS = 10
CHART_WIDTH = 320
CHART_HEIGHT = 120


def histogram(values: Sequence[int], *, top: int, bins: int = HISTOGRAM_BINS) -> dict[str, Any]:
    """Counts of ``values`` in ``bins`` equal bins over ``[0, top]`` and the bars that draw them.

    The last bin includes ``top`` (a completely free GPU).
    """
    top = max(top, 1)
    counts = [0] * bins
    for value in values:
        counts[min(max(value, 0) * bins // top, bins - 1)] += 1
    tallest = max(counts) or 1
    width = CHART_WIDTH / bins
    bars = []
    for position, count in enumerate(counts):
        height = round(count / tallest * (CHART_HEIGHT - 30), 1)  # room for the count above the bar
        bars.append({"low": position * top // bins, "high": (position + 1) * top // bins, "count": count,
                     "x": round(position * width + 1, 1), "y": round(CHART_HEIGHT - 14 - height, 1),
                     "width": round(width - 2, 1), "height": height})
    return {"width": CHART_WIDTH, "height": CHART_HEIGHT, "top": top, "bars": bars}


def latency_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, start: float, end: float
                  ) -> dict[str, Any]:
    """Polylines of ``(time, latency seconds)`` points per series between ``start`` and ``end``; y in ms."""
    span = max(end - start, 1e-9)
    highest_ms = max((latency * 1000 for points in series.values() for _, latency in points), default=0.0)
    scale_ms = max(highest_ms * 1.1, 1.0)
    lines = {}
    for name, points in series.items():
        coordinates = [(round((at - start) / span * CHART_WIDTH, 1),
                        round(CHART_HEIGHT - latency * 1000 / scale_ms * CHART_HEIGHT, 1))
                       for at, latency in sorted(points) if start <= at <= end]
        lines[name] = {"points": " ".join(f"{x},{y}" for x, y in coordinates), "count": len(coordinates),
                       "dots": [{"x": x, "y": y} for x, y in coordinates]}
    return {"width": CHART_WIDTH, "height": CHART_HEIGHT, "scale_ms": round(scale_ms, 1),
            "window_seconds": round(end - start), "lines": lines}
