"""Matplotlib building blocks of the report's figures (Agg, no pyplot state).

A figure is one or more panels side by side (one per source: measured, simulated on NETWORK,
never two sources on one axis), a title wrapped to the figure's width, readable axes (a log2
rank axis with integer ticks, log time and speedup axes labelled in plain numbers), one colour
and one marker per configuration, and one legend below the panels (it never covers data).
Lines that would hide one another are shifted sideways by a few points (:func:`dodge`).

:func:`save` writes the PNG (:data:`DPI`) and the SVG, both cut to what is drawn
(``bbox_inches="tight"``): a long title or legend widens the image, never loses characters.
"""

from __future__ import annotations

import io
import math
import textwrap
from typing import Iterable, Sequence

__all__ = ["DPI", "MIN_REPS", "MARKERS", "MODELED", "modeled_series", "new_figure", "new_axes",
           "rank_axis", "percent_axis", "style_for", "source_label", "legend", "outside_legend",
           "save", "describe", "log_y", "dodge", "shifted", "plot_line", "SeriesStyles",
           "unique_labels", "shared_y_ranges", "apply_y_range"]

DPI = 150
MIN_REPS = 5  # error bars (quartiles) only from at least this many repetitions
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
_PANEL_IN = 4.9  # width of one panel of a multi-panel figure (inches)
_LEGEND_CHARS = 36  # legend entries wrap after this many characters


def _wrap(text: str, width_in: float, fontsize: float) -> str:
    """``text`` broken at spaces into lines that fit ``width_in`` inches at ``fontsize``
    (DejaVu Sans averages about 0.6 em per character; ``save`` keeps whatever is wider)."""
    chars = max(int(width_in * 72 / (fontsize * 0.6)), 20)
    return textwrap.fill(text, chars, break_long_words=False, break_on_hyphens=False)


def new_figure(title: str, xlabel: str, ylabel: str, panels: Sequence[str | None] = (None,), *,
               wide: bool = False):
    """A figure with one panel per entry of ``panels`` (its title, or None), side by side with
    their own y scales; returns the figure and the list of axes."""
    from matplotlib.figure import Figure  # the [apps] extra: not at --help

    n = len(panels)
    width = (8.4 if wide else 6.4) if n == 1 else _PANEL_IN * n
    fig = Figure(figsize=(width, 4.4), layout="constrained")
    axes = list(fig.subplots(1, n, squeeze=False)[0])
    fig.suptitle(_wrap(title, width, 10), fontsize=10)
    fig.sparc_title = title  # unwrapped, for describe()
    for ax, panel in zip(axes, panels):
        if panel:
            ax.set_title(_wrap(panel, width / n, 9), fontsize=9)
        ax.set_xlabel(xlabel)
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel(ylabel)
    return fig, axes


def new_axes(title: str, xlabel: str, ylabel: str, *, wide: bool = False):
    """One panel: :func:`new_figure` returning the figure and its axes."""
    fig, axes = new_figure(title, xlabel, ylabel, wide=wide)
    return fig, axes[0]


def rank_axis(ax, ps: Iterable[int]) -> None:
    """x: ranks P on a log2 scale, one integer tick per P present (1, 2, ..., 1,024)."""
    # the [apps] extra: not at --help
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ps = sorted({int(p) for p in ps})
    ax.set_xscale("log", base=2)
    if len(ps) > 12:  # thin the labels, keep powers of two
        ps = [p for p in ps if p & (p - 1) == 0] or ps
    ax.xaxis.set_major_locator(FixedLocator(ps))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(round(v)):,}"))
    ax.set_xlabel("P (ranks, log scale)")
    if len(ps) == 1:  # one P: a little room on both sides
        ax.set_xlim(ps[0] / 1.5, ps[0] * 1.5)


def log_y(ax, *, min_span: float = 5.0) -> None:
    """y on a log scale labelled with plain numbers (1, 2, 5, 10, ...), no 4x10^0, spanning
    at least a factor ``min_span`` (so that two labelled ticks show). Call after plotting."""
    # the [apps] extra: not at --help
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.autoscale_view()
    lo, hi = ax.get_ylim()
    if 0 < lo < hi < lo * min_span:
        mid = math.sqrt(lo * hi)
        ax.set_ylim(mid / math.sqrt(min_span), mid * math.sqrt(min_span))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def percent_axis(ax) -> None:
    """x: density on a log scale, labelled in percent."""
    from matplotlib.ticker import FuncFormatter  # the [apps] extra: not at --help

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v * 100:g}%"))


def source_label(simulated: bool, network: str | None) -> str:
    if simulated:
        return f"simulated ({network})"
    return f"measured (emulated {network})" if network else "measured"


MODELED = " (modeled)"  # the series suffix of rows predicted by a model, not simulated
MODELED_MARKER = "x"
MODELED_LINESTYLE = ":"


def modeled_series(series: str) -> bool:
    """Whether ``series`` is a modeled-only line (:data:`MODELED`)."""
    return series.endswith(MODELED)


class SeriesStyles:
    """Stable colour and marker per configuration, shared by all figures (dense: black
    circles, drawn thicker). A modeled-only line (``NAME (modeled)``) keeps its configuration's
    colour, with its own marker (:data:`MODELED_MARKER`) and a dotted line."""

    def __init__(self, series: Iterable[str], dense: str):
        series = set(series)
        bases = {s[:-len(MODELED)] if modeled_series(s) else s for s in series}
        names = sorted(bases - {dense})
        self.colour = {name: f"C{i % 10}" for i, name in enumerate(names)}
        self.markers = {name: MARKERS[(i + 1) % len(MARKERS)] for i, name in enumerate(names)}
        self.colour[dense] = "black"
        self.markers[dense] = "o"
        for s in series:
            if modeled_series(s):
                self.colour[s] = self.colour.get(s[:-len(MODELED)], "gray")
                self.markers[s] = MODELED_MARKER
        self.dense = dense

    def thick(self, series: str) -> bool:
        return series in (self.dense, self.dense + MODELED)

    def handle(self, series: str):
        """The legend entry of a configuration: its colour, marker, line style and width."""
        from matplotlib.lines import Line2D  # the [apps] extra: not at --help

        return Line2D([], [], color=self.colour.get(series, "gray"),
                      marker=self.markers.get(series, "o"), markersize=5,
                      ls=MODELED_LINESTYLE if modeled_series(series) else "-",
                      lw=2 if self.thick(series) else 1.5, label=series)


def style_for(styles: SeriesStyles, series: str, simulated: bool,
              network: str | None = None) -> dict:
    """Plot keywords: colour and marker by configuration, dashed and hollow when simulated,
    dotted with its own marker when modeled only."""
    colour = styles.colour.get(series, "gray")
    modeled = modeled_series(series)
    return {"color": colour, "marker": styles.markers.get(series, "o"),
            "linestyle": MODELED_LINESTYLE if modeled else "--" if simulated else "-",
            "lw": 2 if styles.thick(series) else 1.5,
            "markerfacecolor": "white" if simulated and not modeled else colour,
            "markersize": 5}


def dodge(lines: dict, *, rel: float = 0.03, step_pt: float = 5.0) -> dict:
    """Horizontal offsets (points) for lines that would hide one another: ``lines`` maps a
    name to its points {x: y}; two lines coincide when they share an x and their y differ by
    less than ``rel`` (relative) at every shared x. Each group of coinciding lines is spread
    around its place, ``step_pt`` apart; every other line gets 0."""
    names = sorted(lines)
    parent = {n: n for n in names}

    def root(n):
        while parent[n] != n:
            n = parent[n]
        return n

    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = set(lines[a]) & set(lines[b])
            if shared and all(_close(lines[a][x], lines[b][x], rel) for x in shared):
                parent[root(b)] = root(a)
    groups: dict = {}
    for n in names:
        groups.setdefault(root(n), []).append(n)
    out = {}
    for members in groups.values():
        for j, n in enumerate(members):
            out[n] = (j - (len(members) - 1) / 2) * step_pt
    return out


def _close(a, b, rel) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= rel * max(abs(a), abs(b))


def shifted(ax, dx_pt: float):
    """The data transform of ``ax`` moved ``dx_pt`` points to the right (0: itself)."""
    if not dx_pt:
        return ax.transData
    from matplotlib.transforms import offset_copy  # the [apps] extra: not at --help

    return offset_copy(ax.transData, fig=ax.figure, x=dx_pt, y=0, units="points")


def plot_line(ax, xs, ys, dx_pt: float = 0.0, **kw):
    """``ax.plot(xs, ys, **kw)`` drawn ``dx_pt`` points to the right; its data count for the
    axis limits all the same (matplotlib leaves a shifted line out of autoscaling)."""
    line, = ax.plot(xs, ys, transform=shifted(ax, dx_pt), **kw)
    if dx_pt:
        ax.update_datalim(list(zip(xs, ys)))
        ax.autoscale_view()
    return line


_LEGEND_SPARE_IN = 1.0  # legend height (in) a figure of 4.4 in holds beside its panels


def outside_legend(fig, handles: list) -> None:
    """The legend below the panels, outside them (constrained layout makes room; the title
    stays alone above), in as many columns as the figure's width holds, long entries
    wrapped."""
    labels = [textwrap.fill(h.get_label(), _LEGEND_CHARS, break_long_words=False)
              for h in handles]
    if not handles:
        return
    longest = max(len(line) for label in labels for line in label.split("\n"))
    entry_in = longest * 8 * 0.6 / 72 + 0.8  # text at 8 pt, handle and padding
    ncols = max(1, min(len(handles), int(fig.get_figwidth() / entry_in)))
    # a legend taller than the panels can spare (many runs) grows the figure instead of
    # collapsing the panels: each row as tall as its longest entry, 8 pt lines
    rows = [labels[i:i + ncols] for i in range(0, len(labels), ncols)]
    legend_in = sum(max(lb.count("\n") + 1 for lb in row) * 8 * 1.2 / 72 + 0.06
                    for row in rows) + 0.2
    if legend_in > _LEGEND_SPARE_IN:
        fig.set_figheight(fig.get_figheight() + legend_in)
    fig.legend(handles=handles, labels=labels, loc="outside lower center", ncols=ncols,
               fontsize=8)


def legend(fig, styles: SeriesStyles, series: Iterable[str], extra: Iterable = ()) -> None:
    """One entry per configuration drawn (its colour and marker), then ``extra``."""
    handles = [styles.handle(s) for s in sorted(set(series), key=lambda s: (s != styles.dense,
                                                                             s))]
    outside_legend(fig, handles + list(extra))


def save(fig, fid: str) -> tuple[bytes, bytes]:
    """The PNG (:data:`DPI`) and SVG of ``fig``, each cut to its drawn extent; the SVG's text
    as glyph outlines (it looks the same without the font) and without a date (``fid`` salts
    its ids: the same figure gives the same bytes)."""
    from matplotlib import rc_context  # the [apps] extra: not at --help
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    # lay out once (constrained layout), then keep that layout and its drawn extent for both
    # files: "tight" and the layout engine would each draw the figure again (3x the time)
    fig.draw_without_rendering()
    fig.set_layout_engine(None)
    bbox = fig.get_tightbbox(fig.canvas.get_renderer()).padded(0.08)
    png = io.BytesIO()
    fig.savefig(png, dpi=DPI, format="png", bbox_inches=bbox)
    svg = io.BytesIO()
    with rc_context({"svg.hashsalt": fid, "svg.fonttype": "path"}):
        fig.savefig(svg, format="svg", bbox_inches=bbox, metadata={"Date": None})
    return png.getvalue(), svg.getvalue()


def _unwrap(text: str) -> str:
    return " ".join(text.split("\n"))


def unique_labels(labels: Sequence[str], details: Sequence[str]) -> list[str]:
    """``labels`` with each one that occurs more than once told apart: ``details[i]`` (what
    differs: the whole network spec, the seed, the record) appended, then ``#k`` if that
    is not enough. Two series under one label cannot be read apart in a legend."""
    def dups(xs):
        return {x for x in xs if xs.count(x) > 1}

    out = list(labels)
    twice = dups(out)
    out = [f"{lb}, {d}" if lb in twice and d else lb for lb, d in zip(out, details)]
    twice = dups(out)
    seen: dict = {}
    for i, lb in enumerate(out):
        if lb in twice:
            seen[lb] = seen.get(lb, 0) + 1
            out[i] = f"{lb} #{seen[lb]}"
    return out


# figure id -> one (low, high) y range per panel, in panel order (:func:`shared_y_ranges`)
_Y_RANGES: dict = {}


class shared_y_ranges:
    """``with shared_y_ranges({fid: [(lo, hi), ...]})``: the figures of those ids drawn in
    the block get these y ranges, panel by panel (:func:`apply_y_range`, which the figures'
    ``render`` calls): a rerun's before and after figures on one y range, so that they
    compare."""

    def __init__(self, ranges: dict):
        self.ranges = ranges

    def __enter__(self):
        _Y_RANGES.update(self.ranges)
        return self

    def __exit__(self, *exc):
        for fid in self.ranges:
            _Y_RANGES.pop(fid, None)
        return False


def apply_y_range(fig, fid: str) -> None:
    """Set the y ranges :func:`shared_y_ranges` holds for ``fid`` (nothing when none)."""
    ranges = _Y_RANGES.get(fid)
    if ranges:
        for ax, lim in zip(fig.axes, ranges):
            if lim is not None:
                ax.set_ylim(*lim)


def _axes_meta(ax) -> dict:
    data = [line for line in ax.get_lines() if (line.get_gid() or "").startswith("series")]
    return {"title": _unwrap(ax.get_title()), "xlabel": ax.get_xlabel(),
            "ylabel": ax.get_ylabel(), "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
            "ylim": [float(v) for v in ax.get_ylim()],
            "xticks": [float(t) for t in ax.get_xticks()],
            "xticklabels": [t.get_text() for t in ax.get_xticklabels()],
            "errorbars": len(ax.containers),
            "xdata": sorted({float(x) for line in data for x in line.get_xdata()}),
            "lines": [{"label": line.get_label(), "linestyle": line.get_linestyle(),
                       "marker": line.get_marker(), "color": line.get_color(),
                       # where the points are drawn (pixels at DPI), offsets included
                       "drawn": [list(map(float, p)) for p in line.get_transform().transform(
                           list(zip(line.get_xdata(), line.get_ydata())))]}
                      for line in data]}


def describe(fig) -> dict:
    """What a reader sees, for tests and ``--rerun`` (call after :func:`save`, which lays the
    ticks out): the title, the legend entries (unwrapped), and per panel its title, scales,
    ticks, labels, error bars and data lines. The first panel's keys are also at the top
    level, with ``xdata`` and ``errorbars`` over all panels."""
    panels = [_axes_meta(ax) for ax in fig.axes]
    leg = fig.legends[0] if fig.legends else None
    return {**panels[0], "title": getattr(fig, "sparc_title", ""), "panels": panels,
            "panel_titles": [p["title"] for p in panels],
            "ylabel": panels[0]["ylabel"],
            "legend": [_unwrap(t.get_text()) for t in leg.get_texts()] if leg else [],
            "errorbars": sum(p["errorbars"] for p in panels),
            "xdata": sorted({x for p in panels for x in p["xdata"]})}
