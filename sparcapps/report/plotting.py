"""Matplotlib building blocks of the report's figures (Agg, no pyplot state): axes with
readable labels, a log2 rank axis with integer ticks, one colour per configuration, one marker
per source (measured, simulated on NETWORK), and a PNG of the figure."""

from __future__ import annotations

import io
from typing import Iterable

__all__ = ["new_axes", "rank_axis", "percent_axis", "style_for", "source_label", "legend",
           "png", "describe", "log_y", "SeriesStyles"]

_MARKERS = ("s", "^", "D", "v", "P", "X")


def new_axes(title: str, xlabel: str, ylabel: str, *, wide: bool = False):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.4 if wide else 6.8, 4.4))
    ax = fig.add_subplot()
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def rank_axis(ax, ps: Iterable[int]) -> None:
    """x: ranks P on a log2 scale, one integer tick per P present (1, 2, ..., 1,024)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ps = sorted({int(p) for p in ps})
    ax.set_xscale("log", base=2)
    if len(ps) > 12:  # thin the labels, keep powers of two
        ps = [p for p in ps if p & (p - 1) == 0] or ps
    ax.xaxis.set_major_locator(FixedLocator(ps))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{int(round(v)):,}"))
    ax.set_xlabel("P (ranks, log scale)")


def log_y(ax) -> None:
    """y on a log scale labelled with plain numbers (1, 2, 5, 10, ...), no 4x10^0."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def percent_axis(ax) -> None:
    """x: density on a log scale, labelled in percent."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v * 100:g}%"))


def source_label(simulated: bool, network: str | None) -> str:
    if simulated:
        return f"simulated ({network})"
    return f"measured (emulated {network})" if network else "measured"


class SeriesStyles:
    """Stable colours per configuration and markers per source, shared by all figures."""

    def __init__(self, series: Iterable[str], dense: str):
        names = sorted(set(series) - {dense})
        self.colour = {name: f"C{i % 10}" for i, name in enumerate(names)}
        self.colour[dense] = "black"
        self.sources: dict[tuple, str] = {}

    def marker(self, simulated: bool, network: str | None) -> str:
        key = (simulated, network)
        if key not in self.sources:
            self.sources[key] = "o" if key == (False, None) else _MARKERS[
                sum(k != (False, None) for k in self.sources) % len(_MARKERS)]
        return self.sources[key]


def style_for(styles: SeriesStyles, series: str, simulated: bool, network: str | None) -> dict:
    """Plot keywords: colour by configuration, marker by source, dashed and hollow when
    simulated."""
    colour = styles.colour.get(series, "gray")
    return {"color": colour, "marker": styles.marker(simulated, network),
            "linestyle": "--" if simulated else "-",
            "markerfacecolor": "white" if simulated else colour, "markersize": 5}


def legend(ax, styles: SeriesStyles, series: Iterable[str], sources: Iterable[tuple],
           extra: Iterable = ()) -> None:
    """One entry per configuration (its colour) and, when more than one source is drawn, one
    per source (its marker): 'measured', 'simulated (10gbit)'."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=styles.colour.get(s, "gray"), lw=2, label=s)
               for s in sorted(set(series))]
    sources = sorted(set(sources), key=lambda k: (k[0], str(k[1])))
    if len(sources) > 1 or any(k != (False, None) for k in sources):
        for simulated, network in sources:
            handles.append(Line2D([], [], color="gray", ls="--" if simulated else "-",
                                  marker=styles.marker(simulated, network),
                                  markerfacecolor="white" if simulated else "gray",
                                  label=source_label(simulated, network)))
    handles.extend(extra)
    if len(handles) > 6:
        ax.legend(handles=handles, fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(handles=handles, fontsize=8)


def png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    # fixed margins: tight_layout would draw the figure once more (a third of the time)
    outside = any(getattr(leg, "_bbox_to_anchor", None) is not None
                  for leg in (ax.get_legend() for ax in fig.axes) if leg)
    fig.subplots_adjust(left=0.1, bottom=0.12, top=0.92, right=0.7 if outside else 0.97)
    buf = io.BytesIO()
    fig.savefig(buf, dpi=100, format="png")
    return buf.getvalue()


def describe(fig) -> dict:
    """What a reader sees, for tests and ``--rerun``: scales, tick labels, axis labels, legend
    entries, error bars (call after :func:`png`, which lays the ticks out)."""
    ax = fig.axes[0]
    leg = ax.get_legend()
    return {"title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
            "xticks": [float(t) for t in ax.get_xticks()],
            "xticklabels": [t.get_text() for t in ax.get_xticklabels()],
            "legend": [t.get_text() for t in leg.get_texts()] if leg else [],
            "errorbars": len(ax.containers),
            "xdata": sorted({float(x) for line in ax.get_lines()  # data lines, not axhline
                             if line.get_transform() == ax.transData
                             for x in line.get_xdata()})}
