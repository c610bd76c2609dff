"""The collective figures: strong and weak scaling (time vs P with the dense line), speedup
over dense vs P with error bars from the quartiles, time vs density, measured vs cost model.

Each figure is a :class:`Fig` with a stable id (its PNG name without ``.png``; what
``sparc-report --rerun`` takes), a caption naming the data set, the rows it plots and the
commands that made them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from . import plotting as pl
from .fmt import count, percent, sig, slug
from .rows import REFERENCES, dense_name

__all__ = ["Fig", "collective_figures", "input_label", "group_rows", "render"]


@dataclass
class Fig:
    id: str
    section: str
    caption: str
    png: bytes
    meta: dict  # plotting.describe: scales, ticks, labels, legend entries
    rows: list

    @property
    def commands(self) -> tuple:
        return tuple(sorted({r["command"] for r in self.rows}, key=lambda c: c.line()))


def render(fig) -> tuple[bytes, dict]:
    """The PNG of a figure and its :func:`plotting.describe`, in the order Fig takes them."""
    data = pl.png(fig)
    return data, pl.describe(fig)


def group_rows(rows, keyfunc):
    groups = defaultdict(list)
    for row in rows:
        groups[keyfunc(row)].append(row)
    return sorted(groups.items(), key=lambda kv: tuple(str(v) for v in kv[0]))


def input_label(N=None, density=None, pattern=None, dtype=None, per_rank=False) -> str:
    """'N = 1,048,576 (2^20) float32, density 1%, random supports'."""
    parts = []
    if N is not None:
        parts.append(f"N{'/P' if per_rank else ''} = {count(N)}" + (f" {dtype}" if dtype else ""))
    if density is not None:
        parts.append(f"density {percent(density)}")
    if pattern:
        parts.append(f"{pattern} supports")
    return ", ".join(parts)


def _lines(ax, styles, rows, x, y, *, yerr=None):
    """One line per (configuration, source); returns the configurations and sources drawn."""
    series, sources = set(), set()
    for (name, sim, net), g in group_rows(rows, lambda r: (r["series"], r["simulated"],
                                                           r["network"])):
        g = sorted(g, key=x)
        kw = pl.style_for(styles, name, sim, net)
        if name == dense_name():
            kw["linewidth"] = 2
        xs, ys = [x(r) for r in g], [y(r) for r in g]
        if yerr is not None:
            err = [yerr(r) for r in g]
            if all(e is not None for e in err):
                lo = [max(v - e[0], 0) for v, e in zip(ys, err)]
                hi = [max(e[1] - v, 0) for v, e in zip(ys, err)]
                ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, **kw)
                series.add(name), sources.add((sim, net))
                continue
        ax.plot(xs, ys, **kw)
        series.add(name)
        sources.add((sim, net))
    return series, sources


def _time_err(r):
    if r["q25"] is None or r["q75"] is None:
        return None
    return (r["q25"] * 1e3, r["q75"] * 1e3)


def _scaling(rows, styles, kind):
    """Strong (N fixed) or weak (N/P fixed) scaling: median time vs P, quartiles as bars."""
    figs = []
    if kind == "strong":
        key = lambda r: (r["N"], r["density"], r["pattern"], r["dtype"])  # noqa: E731
    else:
        key = lambda r: (r["N"] // r["P"] if r["N"] and r["P"] and r["N"] % r["P"] == 0  # noqa
                         else None, r["density"], r["pattern"], r["dtype"])
    for k, grp in group_rows(rows, key):
        if k[0] is None or len({r["P"] for r in grp}) < 2:
            continue
        if kind == "weak" and len({r["N"] for r in grp}) < 2:
            continue
        what = input_label(*k, per_rank=kind == "weak")
        fig, ax = pl.new_axes(f"{kind} scaling: {what}", "P", "median time (ms, log scale)")
        series, sources = _lines(ax, styles, grp, lambda r: r["P"], lambda r: r["median"] * 1e3,
                                 yerr=_time_err)
        pl.rank_axis(ax, [r["P"] for r in grp])
        if all(r["median"] > 0 for r in grp):
            pl.log_y(ax)
        pl.legend(ax, styles, series, sources)
        fid = slug(kind, "N" if kind == "strong" else "NperP", k[0], "d", k[1], k[2], k[3])
        figs.append(Fig(fid, f"{kind.capitalize()} scaling", f"{kind} scaling, {what}; bars: "
                        "quartiles of the repetitions", *render(fig), grp))
    return figs


def _speedup(rows, styles):
    figs = []
    dense = dense_name()
    usable = [r for r in rows if r["algorithm"] != dense and r["speedup"] is not None
              and (r["P"] or 0) > 1]
    for k, grp in group_rows(usable, lambda r: (r["N"], r["density"], r["pattern"], r["dtype"])):
        if len({r["P"] for r in grp}) < 2:
            continue
        what = input_label(*k)
        fig, ax = pl.new_axes(f"speedup over dense: {what}", "P", "speedup over dense (x)")
        series, sources = _lines(
            ax, styles, grp, lambda r: r["P"], lambda r: r["speedup"],
            yerr=lambda r: None if r["speedup_lo"] is None else (r["speedup_lo"],
                                                                 r["speedup_hi"]))
        ax.axhline(1.0, color="black", lw=1.5)
        ax.set_ylim(bottom=0)
        pl.rank_axis(ax, [r["P"] for r in grp])
        from matplotlib.lines import Line2D

        pl.legend(ax, styles, series, sources,
                  extra=[Line2D([], [], color="black", lw=1.5, label="dense (= 1)")])
        figs.append(Fig(slug("speedup", "N", k[0], "d", k[1], k[2], k[3]), "Speedup over dense",
                        f"speedup over dense, {what}; bars: dense quartiles over this "
                        "algorithm's quartiles (q25/q75 .. q75/q25); P = 1 left out (no "
                        "communication)", *render(fig), grp))
    return figs


def _vs_density(rows, styles):
    figs = []
    for k, grp in group_rows([r for r in rows if r["density"]],
                             lambda r: (r["P"], r["N"], r["pattern"], r["dtype"])):
        if len({r["density"] for r in grp}) < 2:
            continue
        what = f"P = {k[0]}, " + input_label(k[1], None, k[2], k[3])
        fig, ax = pl.new_axes(f"time vs density: {what}", "density (nonzeros per rank / N)",
                              "median time (ms, log scale)")
        series, sources = _lines(ax, styles, grp, lambda r: r["density"],
                                 lambda r: r["median"] * 1e3, yerr=_time_err)
        pl.percent_axis(ax)
        if all(r["median"] > 0 for r in grp):
            pl.log_y(ax)
        pl.legend(ax, styles, series, sources)
        figs.append(Fig(slug("density", "P", k[0], "N", k[1], k[2], k[3]), "Time vs density",
                        f"time vs density, {what}", *render(fig), grp))
    return figs


def _model(rows, styles):
    figs = []
    modelled = [r for r in rows if r["density"] and not r["simulated"]
                and any(r[key] is not None for key, _, _ in REFERENCES)]
    for k, grp in group_rows(modelled, lambda r: (r["P"], r["N"], r["pattern"], r["dtype"])):
        if len({r["density"] for r in grp}) < 2:
            continue
        what = f"P = {k[0]}, " + input_label(k[1], None, k[2], k[3])
        fig, ax = pl.new_axes(f"measured (solid) vs cost model (dashed): {what}",
                              "density (nonzeros per rank / N)", "time (ms, log scale)",
                              wide=True)
        from matplotlib.lines import Line2D

        extra = []
        series = set()
        for name, g in group_rows(grp, lambda r: r["series"]):
            g = sorted(g, key=lambda r: r["density"])
            colour = styles.colour.get(name, "gray")
            ax.plot([r["density"] for r in g], [r["median"] * 1e3 for r in g], "o-",
                    color=colour)
            pts = [(r["density"], r["model_seconds"] * 1e3) for r in g
                   if r["model_seconds"] is not None]
            if pts:
                ax.plot(*zip(*pts), "--", color=colour)
            series.add(name)
        for key, label, style in REFERENCES[1:]:  # the same for every algorithm: one line each
            by_density = {r["density"]: r[key] * 1e3 for r in grp if r[key] is not None}
            if by_density:
                xs = sorted(by_density)
                ax.plot(xs, [by_density[x] for x in xs], style, color="gray")
                extra.append(Line2D([], [], color="gray", ls=style, label=label))
        extra.append(Line2D([], [], color="gray", ls="--", label="cost model"))
        pl.percent_axis(ax)
        if all(r["median"] > 0 for r in grp):
            pl.log_y(ax)
        pl.legend(ax, styles, series, [(False, None)], extra=extra)
        figs.append(Fig(slug("model", "P", k[0], "N", k[1], k[2], k[3]),
                        "Measured vs cost model vs lower bound",
                        f"measured vs cost model, {what}", *render(fig), grp))
    return figs


def collective_figures(rows) -> list[Fig]:
    """Every collective figure the rows support, in report order."""
    styles = pl.SeriesStyles([r["series"] for r in rows], dense_name())
    return (_scaling(rows, styles, "strong") + _scaling(rows, styles, "weak")
            + _speedup(rows, styles) + _vs_density(rows, styles) + _model(rows, styles))


def speedup_text(r) -> str:
    if r["speedup"] is None:
        return ""
    if r["speedup_lo"] is None:
        return sig(r["speedup"])
    return f"{sig(r['speedup'])} ({sig(r['speedup_lo'], 2)}\u2013{sig(r['speedup_hi'], 2)})"
