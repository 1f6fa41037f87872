"""Plots as inline SVG text: line charts (CDFs, time series), stacked bars, step timelines.

Small and dependency-free so a report is one HTML file that opens anywhere with no
network. Every function returns a complete ``<svg>`` element; hovering a mark shows
its value (``<title>``), no script needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

__all__ = ("PALETTE", "Series", "line_chart", "stacked_bars", "timelines")

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948",
           "#9c755f", "#ff9da7", "#bab0ac")

W, H = 600, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 32, 52

#: A named series of (x, y) points.
Series = tuple[str, Sequence[tuple[float, float]]]


def _finite(v: float) -> float:
    """``v``, or 0 for NaN and ±inf: a figure that is not a number has no place on an axis
    (a division by a zero duration upstream must not crash the whole report)."""
    return v if math.isfinite(v) else 0.0


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e3:
        return f"{v / 1e3:.3g}k"
    if a >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def _log_ticks(lo: float, hi: float) -> list[float]:
    decades = range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
    # Few decades: 1-2-5 ticks, so a narrow range still has labels.
    steps = (1.0, 2.0, 5.0) if len(decades) <= 3 else (1.0,)
    ticks = [m * 10.0**e for e in decades for m in steps if lo <= m * 10.0**e <= hi]
    return ticks or [lo, hi]


def _open(title: str, width: int = W, height: int = H) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
        f'<text x="{LEFT}" y="18" class="title">{escape(title)}</text>',
    ]


def _legend(names: Sequence[str], width: int = W) -> list[str]:
    out, x = [], LEFT
    for i, name in enumerate(names):
        color = PALETTE[i % len(PALETTE)]
        out.append(f'<rect x="{x}" y="{H - 14}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14}" y="{H - 5}" class="legend">{escape(name)}</text>')
        x += 24 + 7 * len(name)
        if x > width - 80:
            break
    return out


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    step: bool = False,
    markers: bool = False,
) -> str:
    """Lines over a shared x axis (``step`` draws a staircase, as a CDF should be read).
    Points with a NaN or infinite coordinate are left out."""
    series = [(name, [p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])])
              for name, pts in series]
    points = [p for _, pts in series for p in pts if not log_x or p[0] > 0]
    out = _open(title)
    if not points:
        out.append(f'<text x="{W / 2}" y="{H / 2}" class="empty">no data</text></svg>')
        return "".join(out)
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = min(xs), max(xs)
    if log_x:
        x0, x1 = max(x0, 1e-6), max(x1, x0 * 10)
    elif x1 == x0:
        x1 = x0 + 1
    y0, y1 = 0.0, max(ys) or 1.0
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(x: float) -> float:
        if log_x:
            return LEFT + (math.log10(max(x, x0)) - math.log10(x0)) / (
                math.log10(x1) - math.log10(x0)) * pw
        return LEFT + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return TOP + ph - (y - y0) / (y1 - y0) * ph

    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" class="plot"/>')
    for t in _ticks(y0, y1):
        y = sy(t)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{LEFT - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">'
                   f'{_fmt(t)}</text>')
    for t in (_log_ticks(x0, x1) if log_x else _ticks(x0, x1)):
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + ph}" class="grid"/>'
                   f'<text x="{x:.1f}" y="{TOP + ph + 16}" class="tick" text-anchor="middle">'
                   f'{_fmt(t)}</text>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 20}" class="axis" text-anchor="middle">'
               f'{escape(x_label)}</text>'
               f'<text transform="translate(14 {TOP + ph / 2}) rotate(-90)" class="axis" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    for i, (name, pts) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        usable = [p for p in pts if not log_x or p[0] > 0]
        if not usable:
            continue
        coords: list[str] = []
        prev_y: float | None = None
        for x, y in usable:
            if step and prev_y is not None:
                coords.append(f"{sx(x):.1f},{sy(prev_y):.1f}")
            coords.append(f"{sx(x):.1f},{sy(y):.1f}")
            prev_y = y
        out.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" '
                   f'points="{" ".join(coords)}"><title>{escape(name)}</title></polyline>')
        if markers:
            for x, y in usable:
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" fill="{color}">'
                           f'<title>{escape(name)}: {_fmt(x)} → {_fmt(y)}</title></circle>')
    out.extend(_legend([name for name, _ in series]))
    out.append("</svg>")
    return "".join(out)


def stacked_bars(
    title: str, categories: Sequence[str], stacks: Sequence[tuple[str, Sequence[float]]], *,
    unit: str,
) -> str:
    """One horizontal bar per category, split into the named parts of ``stacks``."""
    out = _open(title)
    stacks = [(name, [_finite(v) for v in values]) for name, values in stacks]
    totals = [sum(values[i] for _, values in stacks) for i in range(len(categories))]
    top = max(totals, default=0.0) or 1.0
    pw = W - LEFT - RIGHT - 40
    row = (H - TOP - BOTTOM) / max(1, len(categories))
    bar = min(22.0, row * 0.7)
    for t in _ticks(0.0, top):
        x = LEFT + 40 + t / top * pw
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{H - BOTTOM}" class="grid"/>'
                   f'<text x="{x:.1f}" y="{H - BOTTOM + 16}" class="tick" text-anchor="middle">'
                   f'{_fmt(t)}</text>')
    out.append(f'<text x="{LEFT + 40 + pw / 2}" y="{H - 20}" class="axis" '
               f'text-anchor="middle">{escape(unit)}</text>')
    for i, cat in enumerate(categories):
        y = TOP + i * row + (row - bar) / 2
        out.append(f'<text x="{LEFT + 34}" y="{y + bar / 2 + 4:.1f}" class="tick" '
                   f'text-anchor="end">{escape(cat)}</text>')
        x = LEFT + 40.0
        for j, (name, values) in enumerate(stacks):
            width = values[i] / top * pw
            if width <= 0:
                continue
            out.append(f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{max(width, 0.5):.1f}" '
                       f'height="{bar:.1f}" fill="{PALETTE[j % len(PALETTE)]}"><title>'
                       f'{escape(cat)} {escape(name)}: {values[i]:.4g} {escape(unit)}'
                       f'</title></rect>')
            x += width
    out.extend(_legend([name for name, _ in stacks]))
    out.append("</svg>")
    return "".join(out)


def timelines(
    title: str,
    rows: Sequence[tuple[str, Sequence[tuple[float, float, int, str]]]],
    phase_names: Sequence[str],
) -> str:
    """One row per item (a run): segments ``(start, length, phase index, label)`` in ms."""
    rows = [(name, [(_finite(s), _finite(n), p, label) for s, n, p, label in segs])
            for name, segs in rows]
    height = max(H, TOP + BOTTOM + 22 * len(rows))
    out = _open(title, W, height)
    end = max((s + n for _, segs in rows for s, n, _, _ in segs), default=0.0) or 1.0
    label_w = 150
    pw = W - label_w - RIGHT
    row = (height - TOP - BOTTOM) / max(1, len(rows))
    for t in _ticks(0.0, end):
        x = label_w + t / end * pw
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{height - BOTTOM}" '
                   f'class="grid"/><text x="{x:.1f}" y="{height - BOTTOM + 16}" class="tick" '
                   f'text-anchor="middle">{_fmt(t)}</text>')
    out.append(f'<text x="{label_w + pw / 2}" y="{height - 20}" class="axis" '
               f'text-anchor="middle">ms since the run was created</text>')
    for i, (name, segs) in enumerate(rows):
        y = TOP + i * row + row * 0.15
        out.append(f'<text x="{label_w - 6}" y="{y + row * 0.5:.1f}" class="tick" '
                   f'text-anchor="end">{escape(name[-18:])}</text>')
        for start, length, phase, label in segs:
            out.append(f'<rect class="bar" x="{label_w + start / end * pw:.2f}" y="{y:.1f}" '
                       f'width="{max(length / end * pw, 0.3):.2f}" height="{row * 0.7:.1f}" '
                       f'fill="{PALETTE[phase % len(PALETTE)]}"><title>{escape(label)}: '
                       f'{length:.3f} ms</title></rect>')
    x = LEFT
    for i, name in enumerate(phase_names):
        out.append(f'<rect x="{x}" y="{height - 14}" width="10" height="10" '
                   f'fill="{PALETTE[i % len(PALETTE)]}"/><text x="{x + 14}" y="{height - 5}" '
                   f'class="legend">{escape(name)}</text>')
        x += 24 + 7 * len(name)
    out.append("</svg>")
    return "".join(out)
