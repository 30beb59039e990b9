"""Figures and tables as data, drawn twice from the same description: matplotlib (PNG, SVG, PDF; byte-reproducible)
and plotly (interactive, for report.html).

Panel kinds, the papers' plot forms: "lines" (x-y lines, e.g. IOPS vs processes; point labels such as the queue
depth go in ``text``), "cdf" (latency CDFs, with ``marks`` such as the P99 on each curve), "scatter" (e.g.
bandwidth vs latency percentiles), "bars" (grouped bars over categories) and "heatmap" (normalised grids with the
value in each cell). Traces with ``paper=True`` are the paper's own numbers, drawn hollow and dashed.
"""

from __future__ import annotations

import functools
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The same colour for a scheduler in every figure (and for any other name: by first appearance).
COLORS = {
    "none": "#4c72b0", "mq-deadline": "#dd8452", "kyber": "#55a868", "bfq": "#c44e52", "k2": "#8172b3",
    "kyber-fairness": "#937860", "noop": "#da8bc3", "deadline": "#8c8c8c", "cfq": "#ccb974",
}
CYCLE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974",
         "#64b5cd"]


@dataclass
class Trace:
    name: str
    x: list[Any]
    y: list[float | None]
    text: list[str] | None = None              # a label per point (drawn next to it)
    marks: list[tuple[float, str]] = field(default_factory=list)   # (x, label): e.g. the P99 on a CDF
    paper: bool = False                        # the paper's numbers: hollow markers, dashed
    color: str | None = None                   # default: by name
    symbol: str = "circle"                     # circle, square, diamond, triangle
    hover: list[str] | None = None             # a label per point shown on hover only (interactive figure)


@dataclass
class Heat:
    x: list[str]
    y: list[str]
    z: list[list[float | None]]                # z[row][col], rows in y order (first row drawn at the bottom)
    text: list[list[str]] | None = None        # cell labels (default: the value)
    zmin: float | None = None
    zmax: float | None = None
    colorbar: str = ""
    own_scale: bool = False                    # its own colour scale and bar (else one shared by the figure's maps)


@dataclass
class Panel:
    title: str
    kind: str = "lines"                        # lines, cdf, tail (1 - CDF: steps, no markers), scatter, bars, heatmap
    traces: list[Trace] = field(default_factory=list)
    heat: Heat | None = None
    xlabel: str = ""
    ylabel: str = ""
    xlog: bool = False
    ylog: bool = False
    xcategories: list[str] | None = None       # categorical x (bars; lines over labelled settings)
    band: tuple[float, float] | None = None    # scatter: y = x drawn, and y in [lo x, hi x] shaded (sim vs paper)


@dataclass
class Figure:
    id: str                                    # file stem: DIR/figures/<id>.png|svg|pdf
    ref: str                                   # "Fig. 7"
    title: str
    panels: list[Panel]
    caption: str = ""
    cols: int | None = None
    size: tuple[float, float] | None = None    # inches (width, height) of the static figure; default by panels


@dataclass
class Table:
    id: str
    ref: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


# ---------------------------------------------------------------- data for figures and tables

def cdf(bins: list[list[int]], max_points: int = 400) -> tuple[list[float], list[float]]:
    """A latency CDF (x in µs, y 0..1) from histogram bins [[ns, count], ...]."""
    total = sum(c for _, c in bins)
    if not total:
        return [], []
    xs, ys, acc = [], [], 0
    for ns, c in sorted(bins):
        acc += c
        xs.append(ns / 1000)
        ys.append(acc / total)
    if len(xs) > max_points:  # thin evenly, keep the tail
        step = len(xs) / max_points
        keep = sorted({int(i * step) for i in range(max_points)} | {len(xs) - 1})
        xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
    return xs, ys


def merge_bins(dirs: list[dict[str, Any]]) -> list[list[int]]:
    acc: dict[int, int] = {}
    for d in dirs:
        for ns, c in d.get("bins", []):
            acc[ns] = acc.get(ns, 0) + c
    return [[k, acc[k]] for k in sorted(acc)]


def fmt(v: float | None, digits: int = 3) -> str:
    """A number as people read it: 3 significant digits, thousands separated."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, digits - 1 - mag)
    return f"{v:,.{decimals}f}"


def _palette(fig: Figure) -> dict[str, str]:
    """Colours of the measured series: schedulers by name, anything else by first appearance."""
    out: dict[str, str] = {}
    i = 0
    for p in fig.panels:
        for t in p.traces:
            if not t.paper and t.name not in out:
                out[t.name] = COLORS.get(t.name) or CYCLE[i % len(CYCLE)]
                i += 1
    return out


def _color(t: Trace, pal: dict[str, str]) -> str:
    """A trace's colour; the paper's numbers take their series' colour ("paper: bfq"), else black."""
    if t.color:
        return t.color
    key = t.name.removeprefix("paper: ")
    return pal.get(key) or COLORS.get(key) or ("#222222" if t.paper else "#333333")


def _grid(fig: Figure) -> tuple[int, int]:
    n = len(fig.panels)
    cols = fig.cols or min(n, 3)
    return math.ceil(n / cols), cols


def _finite(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and not math.isfinite(v))


# ---------------------------------------------------------------- matplotlib

_MPL_SYMBOL = {"circle": "o", "square": "s", "diamond": "D", "triangle": "^"}
_RC = {
    "svg.hashsalt": "iosched",     # fixed ids in SVG
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "font.family": "DejaVu Sans",  # shipped with matplotlib: the same glyphs everywhere
    "font.size": 8.5,
    "axes.titlesize": 9,
    "legend.fontsize": 7,
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "path.simplify": False,
}
_META = {
    "png": {"Software": None},
    "svg": {"Date": None, "Creator": None},
    "pdf": {"CreationDate": None, "ModDate": None, "Creator": None, "Producer": None},
}


def render_static(fig: Figure, out: Path, formats: tuple[str, ...] = ("png", "svg", "pdf"), *,
                  folder: str = "figures") -> list[Path]:
    """Write the figure as PNG, SVG and PDF into OUT/``folder``/ (file names from the figure's id, made safe); the
    same figure gives the same bytes (no dates, fixed ids)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from ..safepath import file_name
    from ..store import write_file

    paths = []
    with matplotlib.rc_context(_RC):
        rows, cols = _grid(fig)
        f, axes = plt.subplots(rows, cols, figsize=fig.size or (4.3 * cols, 3.3 * rows + 0.5), squeeze=False)
        pal = _palette(fig)
        for ax, panel in zip(axes.flat, fig.panels):
            _draw_mpl(ax, panel, pal, f)
        for ax in list(axes.flat)[len(fig.panels):]:
            ax.set_visible(False)
        f.suptitle(f"{fig.ref}: {fig.title}" if fig.ref else fig.title, fontsize=10)
        f.tight_layout()
        for fmt in formats:
            buf = io.BytesIO()
            f.savefig(buf, format=fmt, metadata=_META[fmt])
            paths.append(write_file(out, f"{folder}/{file_name(fig.id, f'.{fmt}')}", buf.getvalue()))
        plt.close(f)
    return paths


def _draw_mpl(ax, panel: Panel, pal: dict[str, str], f) -> None:
    ax.set_title(panel.title)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    if panel.kind == "heatmap" and panel.heat is not None:
        h = panel.heat
        import numpy as np

        z = np.array([[v if _finite(v) else np.nan for v in row] for row in h.z], dtype=float)
        im = ax.imshow(z, origin="lower", aspect="auto", cmap="viridis", vmin=h.zmin, vmax=h.zmax)
        ax.set_xticks(range(len(h.x)), h.x, rotation=30, ha="right")
        ax.set_yticks(range(len(h.y)), h.y)
        vmax = h.zmax if h.zmax is not None else np.nanmax(z) if np.isfinite(z).any() else 1
        for i in range(len(h.y)):
            for j in range(len(h.x)):
                label = h.text[i][j] if h.text else (f"{z[i, j]:.1f}" if np.isfinite(z[i, j]) else "")
                light = np.isfinite(z[i, j]) and z[i, j] < 0.6 * vmax
                ax.text(j, i, label, ha="center", va="center", fontsize=6.5, color="white" if light else "black")
        cb = f.colorbar(im, ax=ax)
        cb.set_label(h.colorbar)
        return
    if panel.kind == "bars":
        cats = panel.xcategories or sorted({str(x) for t in panel.traces for x in t.x})
        n = max(1, len(panel.traces))
        width = 0.8 / n
        for k, t in enumerate(panel.traces):
            xs = [cats.index(str(x)) - 0.4 + width * (k + 0.5) for x in t.x]
            ys = [y if _finite(y) else 0 for y in t.y]
            c = _color(t, pal)
            ax.bar(xs, ys, width, label=t.name, color="none" if t.paper else c, edgecolor=c,
                   hatch="//" if t.paper else None)
        ax.set_xticks(range(len(cats)), cats)
    else:
        if panel.band:
            lo, hi = _band_span(panel)
            xs = [lo, hi]
            ax.fill_between(xs, [x * panel.band[0] for x in xs], [x * panel.band[1] for x in xs], color="#cccccc",
                            alpha=0.45, lw=0, label=f"±{_band_pct(panel.band)}")
            ax.plot(xs, xs, color="#555555", lw=0.8, label="sim = paper")
        for t in panel.traces:
            pts = [(x, y) for x, y in zip(t.x, t.y) if _finite(y) and _finite(x)]
            if not pts:
                continue
            xs, ys = zip(*pts)
            if panel.xcategories:
                xs = [panel.xcategories.index(str(x)) for x in xs]
            c = _color(t, pal)
            m = _MPL_SYMBOL.get(t.symbol, "o")
            if panel.kind in ("cdf", "tail"):
                ax.step(xs, ys, where="post", color=c, label=t.name, linestyle="--" if t.paper else "-", lw=1.3)
            elif panel.kind == "scatter" or t.paper:
                ax.plot(xs, ys, linestyle="none" if panel.kind == "scatter" else "--", marker=m, color=c,
                        markerfacecolor="none" if t.paper else c, label=t.name, ms=5, lw=0.8)
            else:
                ax.plot(xs, ys, marker=m, color=c, label=t.name, ms=3.5, lw=1.3)
            if t.text:
                for x, y, s in zip(xs, ys, [s for (x0, y0), s in zip(zip(t.x, t.y), t.text)
                                            if _finite(y0) and _finite(x0)]):
                    ax.annotate(s, (x, y), textcoords="offset points", xytext=(2, 3), fontsize=5.5, color=c)
            for mx, label in t.marks:
                ax.axvline(mx, color=c, lw=0.7, ls=":")
                ax.annotate(label, (mx, 0.02 if panel.kind == "cdf" else 0), xycoords=("data", "axes fraction"),
                            rotation=90, fontsize=5.5, color=c, xytext=(2, 0), textcoords="offset points")
        if panel.xcategories:
            ax.set_xticks(range(len(panel.xcategories)), panel.xcategories)
    if panel.xlog:
        ax.set_xscale("log")
    if panel.ylog:
        ax.set_yscale("log")
    if panel.kind == "cdf":
        ax.set_ylim(0, 1.02)
    ax.grid(True, lw=0.3, alpha=0.5)
    if panel.band:
        ax.legend(loc="upper left", frameon=False, ncol=2, fontsize=6)
    elif panel.traces:
        ax.legend(loc="best", frameon=False)


def _band_span(panel: Panel) -> tuple[float, float]:
    """The x range a band is drawn over: every positive coordinate of the panel, with a margin."""
    vals = [v for t in panel.traces for v in list(t.x) + list(t.y) if _finite(v) and v > 0]
    return (min(vals) / 1.5, max(vals) * 1.5) if vals else (0.1, 10.0)


def _band_pct(band: tuple[float, float]) -> str:
    return f"{round((band[1] - 1) * 100)}%"


# ---------------------------------------------------------------- plotly

_PLOTLY_SYMBOL = {"circle": "circle", "square": "square", "diamond": "diamond", "triangle": "triangle-up"}


def render_plotly(fig: Figure) -> str:
    """The figure as an HTML <div> for report.html (plotly.js is included once by the page, not here)."""
    import plotly.io as pio

    # Validated already (plotly_figure's test checks it with plotly's own classes): validating again per
    # figure took most of a report's drawing time.
    return pio.to_html(plotly_figure(fig), include_plotlyjs=False, full_html=False, div_id=f"fig-{fig.id}",
                       config={"displaylogo": False, "responsive": True}, validate=False)


def _subplot_layout(rows: int, cols: int, horizontal_spacing: float, vertical_spacing: float,
                    titles: list[str]) -> dict[str, Any]:
    """The layout plotly's make_subplots gives a grid (axes with their domains, row 1 at the top; an annotation per
    non-empty title) with the report's template, computed as plotly computes it: make_subplots validates every
    property and took ~0.1-0.35 s per figure. A test holds the two equal over many grid shapes."""
    widths = [(1.0 - horizontal_spacing * (cols - 1)) / cols] * cols
    heights = [(1.0 - vertical_spacing * (rows - 1)) / rows] * rows
    clamp = lambda v: 0.0 if -0.01 < v < 0.0 else 1.0 if 1.0 < v < 1.01 else v  # noqa: E731 - as plotly rounds
    layout: dict[str, Any] = {}
    annotations = []
    for r in range(rows):
        bottom = sum(heights[:rows - 1 - r]) + (rows - 1 - r) * vertical_spacing
        y_domain = [clamp(bottom), clamp(bottom + heights[-1 - r])]
        for c in range(cols):
            left = sum(widths[:c]) + c * horizontal_spacing
            x_domain = [left, left + widths[c]]
            n = "" if r == 0 and c == 0 else str(r * cols + c + 1)
            # plotly's validator rounds a domain's 1.0000000000000002 to 1; its titles keep the sum unrounded.
            layout[f"xaxis{n}"] = {"anchor": f"y{n}", "domain": [clamp(v) for v in x_domain]}
            layout[f"yaxis{n}"] = {"anchor": f"x{n}", "domain": y_domain}
            i = r * cols + c
            if i < len(titles) and titles[i]:
                annotations.append({"font": {"size": 16}, "showarrow": False, "text": titles[i],
                                    "x": sum(x_domain) / 2.0, "xanchor": "center", "xref": "paper",
                                    "y": y_domain[1], "yanchor": "bottom", "yref": "paper"})
    if annotations:
        layout["annotations"] = annotations
    layout["template"] = _template()
    return layout


@functools.lru_cache(maxsize=1)
def plotly_template_json() -> str:
    """plotly's "plotly_white" template as JSON (loading it takes ~0.1 s: html.prepare does it ahead)."""
    import plotly.io as pio

    return json.dumps(pio.templates["plotly_white"].to_plotly_json())


def _template() -> dict[str, Any]:
    return json.loads(plotly_template_json())


def _no_none(d: dict[str, Any]) -> dict[str, Any]:
    """Drop unset properties, as plotly's classes do."""
    return {k: v for k, v in d.items() if v is not None}


def plotly_figure(fig: Figure) -> dict[str, Any]:
    """The figure as plotly's JSON (data and layout), built as plain dicts: building every property through
    plotly's validating classes cost ~0.15-0.35 s per figure (6.7 s of a full report's drawing, 2.4 s of a
    one-run report) for nothing the browser needs. A test checks the result against plotly's own classes."""
    rows, cols = _grid(fig)
    height_px = int(fig.size[1] * 100) if fig.size else 330 * rows + 60
    # About 110 px between rows (room for the next row's titles), as a fraction of the height: plotly refuses a
    # spacing above 1 / (rows - 1), which a fixed fraction passes from 8 rows on (e.g. a job file of 17 jobs).
    vertical_spacing = min(0.16, 110 / height_px, 0.9 / (rows - 1)) if rows > 1 else 0.1
    # Maps with a colour bar each need room for it between the columns.
    own_bars = any(p.heat is not None and p.heat.own_scale for p in fig.panels)
    layout = _subplot_layout(rows, cols, 0.17 if own_bars else 0.09, vertical_spacing, [p.title for p in fig.panels])
    layout.update(height=height_px, margin={"l": 60, "r": 30, "t": 60, "b": 50}, barmode="group",
                  legend={"font": {"size": 10}}, font={"size": 11})
    out: dict[str, Any] = {"data": [], "layout": layout}
    data: list[dict[str, Any]] = out["data"]
    pal = _palette(fig)
    shown: set[str] = set()
    heat_n = 0
    for i, panel in enumerate(fig.panels):
        n = "" if i == 0 else str(i + 1)     # plotly numbers a grid's axes row by row: x, x2, x3, ...
        xaxis, yaxis = layout[f"xaxis{n}"], layout[f"yaxis{n}"]
        axes = {"xaxis": f"x{n}", "yaxis": f"y{n}"}
        if panel.band:
            lo, hi = _band_span(panel)
            grey = {"color": "rgba(120,120,120,0.6)", "width": 0.5}
            data.append({"type": "scatter", "x": [lo, hi], "y": [lo * panel.band[0], hi * panel.band[0]],
                         "mode": "lines", "line": grey, "hoverinfo": "skip", "showlegend": False,
                         "legendgroup": "band", **axes})
            data.append({"type": "scatter", "x": [lo, hi], "y": [lo * panel.band[1], hi * panel.band[1]],
                         "mode": "lines", "line": grey, "fill": "tonexty", "fillcolor": "rgba(150,150,150,0.25)",
                         "hoverinfo": "skip", "name": f"±{_band_pct(panel.band)}", "legendgroup": "band",
                         **axes})
            data.append({"type": "scatter", "x": [lo, hi], "y": [lo, hi], "mode": "lines",
                         "line": {"color": "#555555", "width": 1}, "hoverinfo": "skip", "name": "sim = paper",
                         **axes})
        if panel.kind == "heatmap" and panel.heat is not None:
            h = panel.heat
            heat_n += 1
            text = h.text or [[(f"{v:.1f}" if _finite(v) else "") for v in row] for row in h.z]
            axis = f"coloraxis{heat_n}" if h.own_scale and heat_n > 1 else "coloraxis"
            data.append(_no_none({"type": "heatmap", "x": h.x, "y": h.y,
                                  "z": [[v if _finite(v) else None for v in row] for row in h.z],
                                  "text": text, "texttemplate": "%{text}", "zmin": h.zmin, "zmax": h.zmax,
                                  "colorscale": "Viridis", "coloraxis": axis, "name": panel.title,
                                  "hovertemplate": "%{y}, %{x}: %{z:.2f}<extra></extra>", **axes}))
            bar: dict[str, Any] = {"title": {"text": h.colorbar}}
            if h.own_scale:
                # Beside its own map: at the right edge of the subplot, as tall as it.
                (x0, x1), (y0, y1) = xaxis["domain"], yaxis["domain"]
                bar.update(x=x1 + 0.005, xanchor="left", y=(y0 + y1) / 2, yanchor="middle", len=y1 - y0,
                           thickness=12)
            layout[axis] = _no_none({"colorscale": "Viridis", "cmin": h.zmin, "cmax": h.zmax, "colorbar": bar})
            xaxis["type"] = yaxis["type"] = "category"
        for t in panel.traces:
            color = _color(t, pal)
            legend = t.name not in shown
            shown.add(t.name)
            xs = [str(x) for x in t.x] if panel.xcategories else list(t.x)
            ys = [y if _finite(y) else None for y in t.y]
            common = dict(name=t.name, legendgroup=t.name, showlegend=legend, **axes)
            if panel.kind == "bars":
                data.append({"type": "bar", "x": xs, "y": ys,
                             "marker": {"color": "rgba(0,0,0,0)" if t.paper else color,
                                        "line": {"color": color, "width": 1.5},
                                        "pattern": {"shape": "/" if t.paper else ""}}, **common})
                continue
            marker = {"color": "white" if t.paper else color, "symbol": _PLOTLY_SYMBOL.get(t.symbol, "circle"),
                      "line": {"color": color, "width": 1.5}, "size": 7 if (t.paper or panel.kind == "scatter") else 5}
            if panel.kind in ("cdf", "tail"):
                data.append({"type": "scatter", "x": xs, "y": ys, "mode": "lines",
                             "line": {"color": color, "shape": "hv", "dash": "dash" if t.paper else "solid"},
                             **common})
            else:
                mode = "markers" if panel.kind == "scatter" else "lines+markers"
                if t.text:
                    mode += "+text"
                hover = {"hovertext": t.hover, "hoverinfo": "text"} if t.hover else {}
                data.append(_no_none({"type": "scatter", "x": xs, "y": ys, "mode": mode, "marker": marker,
                                      "text": t.text, "textposition": "top right",
                                      "textfont": {"size": 8, "color": color},
                                      "line": {"color": color, "dash": "dash" if t.paper else "solid"}, **hover,
                                      **common}))
            for mx, label in t.marks:
                data.append({"type": "scatter", "x": [mx, mx], "y": [0, 1], "mode": "lines+text",
                             "text": ["", label], "textposition": "top left",
                             "textfont": {"size": 8, "color": color},
                             "line": {"color": color, "dash": "dot", "width": 1}, "hoverinfo": "text",
                             "hovertext": label, "legendgroup": t.name, "showlegend": False, **axes})
        xaxis["title"] = {"text": panel.xlabel}
        yaxis["title"] = {"text": panel.ylabel}
        if panel.xlog:
            xaxis["type"] = "log"
        if panel.ylog:
            yaxis["type"] = "log"
        if panel.xcategories:
            xaxis.update(type="category", categoryorder="array", categoryarray=list(panel.xcategories))
        if panel.kind == "cdf":
            yaxis["range"] = [0, 1.02]
    return out
