"""Chart geometry for the report: plain numbers the SVG templates draw, and the PNG twin.

Kept apart from agent/review/report.py so that what is drawn (this module: scales, ticks, clipping
of outliers) can be read without what is collected (report.py: the ledger). The SVG itself
is written by agent/review/templates/charts.html.j2, so every label passes through the template
engine's escaping.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from agent.record.records import Direction

WIDTH, HEIGHT = 960, 380
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 36, 46      # TOP leaves a lane for runs without a metric


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 5 x 10^k steps)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 12) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def y_range(points: list[float], frontier: list[float], sd: float | None) -> tuple[float, float]:
    """A range that shows the frontier, its band and the bulk of the points; a diverged run
    (bpb 8 when the rest sit near 2) is drawn clipped at the edge, not allowed to flatten
    everything else."""
    band = sd or 0.0
    anchor = sorted(frontier) or sorted(points)
    if not anchor:
        return 0.0, 1.0
    values = sorted(points)
    lo = min([anchor[0] - band] + ([_quantile(values, 0.02)] if values else []))
    hi = max([anchor[-1] + band] + ([_quantile(values, 0.9)] if values else []))
    span = hi - lo or abs(hi) * 0.1 or 1.0
    return lo - 0.08 * span, hi + 0.12 * span


def progress_chart(data: dict[str, Any], metric: str) -> dict[str, Any]:
    """SVG geometry of the progress chart: experiments as points, the kept frontier as steps,
    the seed-noise band (frontier ± one seed sd) around it."""
    points, frontier, sd = data["points"], data["frontier"], data["sd"]
    n = max(data["n"], 1)
    measured = [p["y"] for p in points if p["y"] is not None]
    y_lo, y_hi = y_range(measured, [y for _, y in frontier], sd)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return round(LEFT + (x + 0.5) / (n + 1) * plot_w, 2)

    def sy(y: float) -> float:
        return round(TOP + (y_hi - y) / (y_hi - y_lo) * plot_h, 2)

    drawn = []
    for p in points:
        if p["y"] is None and p["verdict"] == "running":
            continue   # nothing measured yet (the live page): not a failure to draw as one
        if p["y"] is None:
            shape, y = "cross", TOP - 14
        elif p["y"] > y_hi or p["y"] < y_lo:
            shape, y = ("up" if p["y"] > y_hi else "down"), sy(min(max(p["y"], y_lo), y_hi))
        else:
            shape, y = "dot", sy(p["y"])
        drawn.append({"x": sx(p["x"]), "y": y, "shape": shape, "verdict": p["verdict"],
                      "label": p["label"], "id": p["id"]})
    steps, band_top, band_bottom = [], [], []
    for i, (x, y) in enumerate(frontier):
        x_end = frontier[i + 1][0] if i + 1 < len(frontier) else n + 0.5
        for xx in (x, x_end):
            steps.append((sx(xx), sy(y)))
            if sd:
                band_top.append((sx(xx), sy(min(y + sd, y_hi))))
                band_bottom.append((sx(xx), sy(max(y - sd, y_lo))))
    polygon = band_top + band_bottom[::-1]
    x_ticks = [t for t in nice_ticks(0, n, 10) if t == int(t) and 0 < t <= n] or [1]
    return {
        "width": WIDTH, "height": HEIGHT, "left": LEFT, "right": WIDTH - RIGHT, "top": TOP,
        "bottom": HEIGHT - BOTTOM, "points": drawn, "has_data": bool(measured),
        "frontier": " ".join(f"{x},{y}" for x, y in steps),
        "band": " ".join(f"{x},{y}" for x, y in polygon),
        "y_ticks": [{"y": sy(t), "label": f"{t:.4g}"} for t in nice_ticks(y_lo, y_hi)],
        "x_ticks": [{"x": sx(t), "label": str(int(t))} for t in x_ticks],
        "metric": metric, "sd": sd, "direction": data["direction"],
        "failed": sum(1 for p in drawn if p["shape"] == "cross"),
        "clipped": sum(1 for p in drawn if p["shape"] in ("up", "down")),
    }


def calibration_chart(rows: list[dict[str, Any]], size: int = 340) -> dict[str, Any] | None:
    """Predicted delta (with its interval) against the measured delta, one point per scored
    experiment; the diagonal is a perfect prediction. None when nothing was scored."""
    scored = [r for r in rows if r["score"] and r["prediction"]]
    if not scored:
        return None
    values = []
    for r in scored:
        values += [r["score"]["measured_delta"], r["prediction"]["expected_delta"],
                   *r["prediction"]["interval"]]
    top = max(abs(v) for v in values) * 1.1 or 1.0
    margin = 48
    inner = size - 2 * margin + 16

    def s(v: float) -> float:
        return round(margin + (v + top) / (2 * top) * inner, 2)

    def sy(v: float) -> float:
        return round(size - margin - (v + top) / (2 * top) * inner, 2)

    ticks = nice_ticks(-top, top, 5)
    return {
        "size": size, "lo": s(-top), "hi": s(top), "ylo": sy(-top), "yhi": sy(top),
        "zero_x": s(0), "zero_y": sy(0),
        "points": [{"x": s(r["prediction"]["expected_delta"]), "y": sy(r["score"]["measured_delta"]),
                    "x0": s(r["prediction"]["interval"][0]), "x1": s(r["prediction"]["interval"][1]),
                    "covered": r["score"]["covered"],
                    "label": f"{r['id']}: predicted {r['prediction']['expected_delta']:+.4f}, "
                             f"measured {r['score']['measured_delta']:+.4f}"} for r in scored],
        "x_ticks": [{"x": s(t), "label": f"{t:.2g}"} for t in ticks],
        "y_ticks": [{"y": sy(t), "label": f"{t:.2g}"} for t in ticks],
    }


def progress_png(data: dict[str, Any], path: Path, title: str) -> Path:
    """The progress chart as a PNG (matplotlib, no display needed). ImportError without it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points, frontier, sd = data["points"], data["frontier"], data["sd"]
    measured = [p["y"] for p in points if p["y"] is not None]
    y_lo, y_hi = y_range(measured, [y for _, y in frontier], sd)
    fig, ax = plt.subplots(figsize=(10, 4), dpi=120)
    colors = {"keep": "#1a9850", "discard": "#9aa0a6", "inconclusive": "#e6a100", "superseded": "#8250df"}
    for verdict, color in colors.items():
        xs = [p["x"] for p in points if p["verdict"] == verdict and p["y"] is not None]
        ys = [min(max(p["y"], y_lo), y_hi) for p in points if p["verdict"] == verdict and p["y"] is not None]
        if xs:
            ax.scatter(xs, ys, s=36 if verdict == "keep" else 14, color=color, label=verdict,
                       zorder=3, edgecolors="white" if verdict == "keep" else "none")
    failed = [p["x"] for p in points if p["y"] is None]
    if failed:
        ax.scatter(failed, [y_hi] * len(failed), marker="x", s=16, color="#d73027",
                   label="no metric", zorder=3, clip_on=False)
    if frontier:
        xs = [x for x, _ in frontier] + [data["n"] + 0.5]
        ys = [y for _, y in frontier] + [frontier[-1][1]]
        ax.step(xs, ys, where="post", color="#1a9850", linewidth=2, label="kept frontier", zorder=2)
        if sd:
            ax.fill_between(xs, [y - sd for y in ys], [y + sd for y in ys], step="post",
                            color="#1a9850", alpha=0.15, label="± 1 seed sd", zorder=1)
    ax.set_ylim(y_lo, y_hi)
    ax.set_xlim(0, max(data["n"], 1) + 1)
    ax.set_xlabel("experiment")
    better = Direction(data["direction"]).better_word
    ax.set_ylabel(f"{title.split(': ')[-1]} ({better} is better)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if measured or failed:
        ax.legend(loc="upper right", fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
