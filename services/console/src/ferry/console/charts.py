"""Small line charts as inline SVG (no script): a series of (time ms, value) samples."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from html import escape

WIDTH = 480
HEIGHT = 120
PAD_LEFT = 44
PAD_BOTTOM = 18
PAD_TOP = 8


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def _label(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def line_chart(title: str, samples: Sequence[tuple[int, float]], unit: str) -> str:
    """An SVG element; an empty chart with a note when there are fewer than two samples."""
    plot_w = WIDTH - PAD_LEFT - 4
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" '
        f'height="{HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<rect x="{PAD_LEFT}" y="{PAD_TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>',
    ]
    if len(samples) < 2:
        parts.append(
            f'<text x="{PAD_LEFT + 8}" y="{PAD_TOP + plot_h / 2}" class="note">'
            "waiting for samples…</text></svg>"
        )
        return "".join(parts)
    t0, t1 = samples[0][0], samples[-1][0]
    span = max(t1 - t0, 1)
    top = _nice_max(max(v for _, v in samples))
    points = " ".join(
        f"{PAD_LEFT + (t - t0) / span * plot_w:.1f},{PAD_TOP + plot_h - v / top * plot_h:.1f}"
        for t, v in samples
    )
    for frac in (0.0, 0.5, 1.0):
        y = PAD_TOP + plot_h - frac * plot_h
        parts.append(
            f'<line x1="{PAD_LEFT}" x2="{PAD_LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
            'class="grid"/>'
            f'<text x="{PAD_LEFT - 4}" y="{y + 4:.1f}" class="axis" text-anchor="end">'
            f"{_label(top * frac)}</text>"
        )
    parts.append(f'<polyline points="{points}" class="line"/>')
    last = samples[-1][1]
    parts.append(
        f'<text x="{PAD_LEFT}" y="{HEIGHT - 4}" class="axis">'
        f"{escape(_clock(t0))} to {escape(_clock(t1))} UTC · now {_label(last)} {escape(unit)}"
        "</text></svg>"
    )
    return "".join(parts)


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000))
