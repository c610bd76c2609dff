"""The collective figures: strong and weak scaling (time vs P with the dense line), speedup
over dense vs P (log axis), time vs density, measured vs cost model.

Each figure is a :class:`Fig` with a stable id (its PNG and SVG names without the suffix; what
``sparc-report --rerun`` takes), a caption naming the data set, the rows it plots and the
commands that made them. Rows of different sources (measured on this machine, simulated on a
network) go in separate panels, never on one axis, and the caption says they do not compare;
the rows a simulation predicted by its model instead (``"modeled_only"``: a dense baseline too
large to simulate, ``--model-only`` algorithms) share their simulation's axes, each a line of
its own marked "(modeled)" (dotted, its own marker).
Error bars (quartiles) are drawn only for points with at least :data:`plotting.MIN_REPS`
repetitions; the caption says how many points have them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from . import plotting as pl
from .fmt import count, percent, sig, slug
from .rows import REFERENCES, dense_name

__all__ = ["Fig", "collective_figures", "input_label", "group_rows", "render", "series_text",
           "MODEL_LINES"]


@dataclass
class Fig:
    id: str
    section: str
    caption: str
    png: bytes
    svg: bytes
    meta: dict  # plotting.describe: scales, ticks, labels, legend entries, panels
    rows: list

    @property
    def commands(self) -> tuple:
        return tuple(sorted({r["command"] for r in self.rows}, key=lambda c: c.line()))


def render(fig, fid: str) -> tuple[bytes, bytes, dict]:
    """The PNG, the SVG and :func:`plotting.describe` of a figure, in the order Fig takes
    them."""
    pl.apply_y_range(fig, fid)
    png, svg = pl.save(fig, fid)
    return png, svg, pl.describe(fig)


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


def _sources(rows) -> list[tuple]:
    """The sources of ``rows``, (simulated, network), measured first."""
    return sorted({(r["simulated"], r["network"]) for r in rows},
                  key=lambda k: (k[0], str(k[1])))


def _panel_title(key, rows) -> str:
    simulated, network = key
    if not simulated and network is None and rows and all(r["nodes"] == 1 for r in rows):
        return "measured on one node (shared memory)"
    return pl.source_label(simulated, network)


def _panels(title, xlabel, ylabel, rows, enough, *, wide=False):
    """A figure with one panel per source of ``rows`` whose rows are ``enough`` to draw (a
    line needs two points): (figure, [(axes, rows)], rows drawn, caption text) or None when
    no source has enough. The caption text names the sources left out and, with several
    panels, says that they do not compare."""
    sources = _sources(rows)
    parts = [[r for r in rows if (r["simulated"], r["network"]) == k] for k in sources]
    left_out = [_panel_title(k, p) for k, p in zip(sources, parts) if not enough(p)]
    kept = [(k, p) for k, p in zip(sources, parts) if enough(p)]
    if not kept:
        return None
    sources, parts = zip(*kept)
    titles = [_panel_title(k, p) for k, p in zip(sources, parts)]
    fig, axes = pl.new_figure(title, xlabel, ylabel,
                              titles if len(sources) > 1 or sources[0] != (False, None)
                              else [None], wide=wide)
    caveat = (f" The panels differ in source: {' vs '.join(titles)}. Each has its own y axis; "
              "their times do not compare with each other (another network, or a model "
              "instead of a measurement).")
    text = (caveat if len(sources) > 1 else "") + (
        f" Left out (a single point each, in the table): {', '.join(left_out)}."
        if left_out else "")
    return fig, list(zip(axes, parts)), [r for p in parts for r in p], text


def series_text(rows) -> str:
    """What the configurations drawn from ``rows`` are, for the caption: the dense baseline,
    modeled-only lines, simulated lines."""
    series = {r["series"] for r in rows}
    dense = dense_name()
    parts = []
    if dense in series or dense + pl.MODELED in series:
        parts.append(f"{dense}: the baseline, MPI_Allreduce of the densified vectors (black)")
    modeled = sorted(s for s in series if pl.modeled_series(s))
    if modeled:
        parts.append(f"{', '.join(modeled)}: predicted by the cost model for the simulated "
                     "network, not simulated (a dense baseline too large to simulate, or "
                     "--model-only), drawn dotted with x markers on the same axes as the "
                     "simulated lines it compares with")
    if any(r["simulated"] for r in rows if not pl.modeled_series(r["series"])):
        parts.append("simulated lines dashed with hollow markers")
    return (" Series: " + "; ".join(parts) + ".") if parts else ""


def _distinct(key, n=2):
    """A predicate: rows with at least ``n`` distinct ``key`` values."""
    return lambda rows: len({r[key] for r in rows}) >= n


def _lines(ax, styles, rows, x, y, *, err=None) -> tuple[set, int]:
    """One line per configuration of ``rows`` (one source), lines that would hide one another
    shifted sideways; bars from ``err(row)`` (None: no bar at that point). Returns the
    configurations drawn and the number of points with a bar."""
    by = {name: sorted(g, key=x) for (name,), g in group_rows(rows, lambda r: (r["series"],))}
    offsets = pl.dodge({name: {x(r): y(r) for r in g} for name, g in by.items()})
    bars = 0
    for i, (name, g) in enumerate(by.items()):
        kw = pl.style_for(styles, name, g[0]["simulated"], g[0]["network"])
        tr = pl.shifted(ax, offsets[name])
        pl.plot_line(ax, [x(r) for r in g], [y(r) for r in g], offsets[name],
                     gid=f"series-{i}", label=name,
                     zorder=2.5 if name.startswith(dense_name()) else 2,
                     **kw)
        pts = [(x(r), y(r), err(r)) for r in g] if err else []
        pts = [p for p in pts if p[2] is not None]
        if pts:
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts],
                        yerr=[[max(p[1] - p[2][0], 0) for p in pts],
                              [max(p[2][1] - p[1], 0) for p in pts]],
                        fmt="none", ecolor=kw["color"], elinewidth=1, capsize=3, transform=tr)
            # a shifted collection is left out of autoscaling: its extent counts all the same
            ax.update_datalim([(p[0], v) for p in pts for v in p[2]])
            bars += len(pts)
    return set(by), bars


def _bars_text(bars: int, points: int, what: str) -> str:
    if bars == points:
        return f"bars: {what} (every point has >= {pl.MIN_REPS} repetitions)"
    if bars == 0:
        return (f"no bars: fewer than {pl.MIN_REPS} repetitions per point, each point is the "
                "median alone")
    return (f"bars: {what}, only where a point has >= {pl.MIN_REPS} repetitions ({bars} of "
            f"{points} points; the others are the median alone)")


def _time_err(r):
    if r["q25"] is None or r["q75"] is None or (r["n"] or 0) < pl.MIN_REPS:
        return None
    return (r["q25"] * 1e3, r["q75"] * 1e3)


def _speedup_err(r):
    if r["speedup_lo"] is None or (r["speedup_n"] or 0) < pl.MIN_REPS:
        return None
    return (r["speedup_lo"], r["speedup_hi"])


def _scaling(rows, styles, kind):
    """Strong (N fixed) or weak (N/P fixed) scaling: median time vs P, quartiles as bars."""
    figs = []
    if kind == "strong":
        key = lambda r: (r["N"], r["density"], r["pattern"], r["dtype"])  # noqa: E731
    else:
        key = lambda r: (r["N"] // r["P"] if r["N"] and r["P"] and r["N"] % r["P"] == 0  # noqa
                         else None, r["density"], r["pattern"], r["dtype"])
    ps = _distinct("P")
    enough = ps if kind == "strong" else lambda g: ps(g) and _distinct("N")(g)
    for k, grp in group_rows(rows, key):
        what = input_label(*k, per_rank=kind == "weak")
        made = k[0] is not None and _panels(f"{kind} scaling: {what}", "P",
                                            "median time (ms, log scale)", grp, enough)
        if not made:
            continue
        fig, panels, grp, caveat = made
        series, bars = set(), 0
        for ax, part in panels:
            s, b = _lines(ax, styles, part, lambda r: r["P"], lambda r: r["median"] * 1e3,
                          err=_time_err)
            series |= s
            bars += b
            pl.rank_axis(ax, [r["P"] for r in part])
            if all(r["median"] > 0 for r in part):
                pl.log_y(ax)
        pl.legend(fig, styles, series)
        fid = slug(kind, "N" if kind == "strong" else "NperP", k[0], "d", k[1], k[2], k[3])
        figs.append(Fig(fid, f"{kind.capitalize()} scaling", f"{kind} scaling, {what}; "
                        + _bars_text(bars, len(grp), "quartiles of the repetitions") + "."
                        + series_text(grp) + caveat, *render(fig, fid), grp))
    return figs


def _speedup(rows, styles):
    from matplotlib.lines import Line2D  # matplotlib (the [apps] extra): not at --help

    figs = []
    dense = dense_name()
    usable = [r for r in rows if r["algorithm"] != dense and r["speedup"] is not None
              and (r["P"] or 0) > 1]
    for k, grp in group_rows(usable, lambda r: (r["N"], r["density"], r["pattern"], r["dtype"])):
        what = input_label(*k)
        made = _panels(f"speedup over dense: {what}", "P", "speedup over dense (x, log scale)",
                       grp, _distinct("P"))
        if not made:
            continue
        fig, panels, grp, caveat = made
        series, bars = set(), 0
        for ax, part in panels:
            s, b = _lines(ax, styles, part, lambda r: r["P"], lambda r: r["speedup"],
                          err=_speedup_err)
            series |= s
            bars += b
            ax.axhline(1.0, color="black", lw=1.5, zorder=1.5)
            pl.rank_axis(ax, [r["P"] for r in part])
            pl.log_y(ax)
        pl.legend(fig, styles, series,
                  extra=[Line2D([], [], color="black", lw=1.5, label="dense (= 1)")])
        fid = slug("speedup", "N", k[0], "d", k[1], k[2], k[3])
        figs.append(Fig(fid, "Speedup over dense",
                        f"speedup over dense, {what}; " + _bars_text(
                            bars, len(grp), "dense quartiles over this algorithm's quartiles "
                            "(q25/q75 .. q75/q25)") + "; P = 1 left out (no communication). "
                        "dense (= 1): the black line at 1, the baseline every ratio is "
                        "taken against." + series_text(grp)
                        + caveat, *render(fig, fid), grp))
    return figs


def _vs_density(rows, styles):
    figs = []
    for k, grp in group_rows([r for r in rows if r["density"]],
                             lambda r: (r["P"], r["N"], r["pattern"], r["dtype"])):
        what = f"P = {k[0]}, " + input_label(k[1], None, k[2], k[3])
        made = _panels(f"time vs density: {what}", "density (nonzeros per rank / N)",
                       "median time (ms, log scale)", grp, _distinct("density"))
        if not made:
            continue
        fig, panels, grp, caveat = made
        series, bars = set(), 0
        for ax, part in panels:
            s, b = _lines(ax, styles, part, lambda r: r["density"],
                          lambda r: r["median"] * 1e3, err=_time_err)
            series |= s
            bars += b
            pl.percent_axis(ax)
            if all(r["median"] > 0 for r in part):
                pl.log_y(ax)
        pl.legend(fig, styles, series)
        fid = slug("density", "P", k[0], "N", k[1], k[2], k[3])
        figs.append(Fig(fid, "Time vs density", f"time vs density, {what}; "
                        + _bars_text(bars, len(grp), "quartiles of the repetitions") + "."
                        + series_text(grp) + caveat, *render(fig, fid), grp))
    return figs


def _model(rows, styles):
    from matplotlib.lines import Line2D  # matplotlib (the [apps] extra): not at --help

    figs = []
    modelled = [r for r in rows if r["density"] and not r["simulated"]
                and any(r[key] is not None for key, _, _ in REFERENCES)]
    for k, grp in group_rows(modelled, lambda r: (r["P"], r["N"], r["pattern"], r["dtype"],
                                                  r["network"])):
        what = f"P = {k[0]}, " + input_label(k[1], None, k[2], k[3])
        made = _panels(f"measured (solid) vs cost model (dashed): {what}",
                       "density (nonzeros per rank / N)", "time (ms, log scale)", grp,
                       _distinct("density"), wide=True)
        if not made:
            continue
        fig, panels, grp, _ = made
        ax = panels[0][0]
        extra = []
        series = set()
        for i, (name, g) in enumerate(group_rows(grp, lambda r: r["series"])):
            g = sorted(g, key=lambda r: r["density"])
            kw = pl.style_for(styles, name, False)
            ax.plot([r["density"] for r in g], [r["median"] * 1e3 for r in g],
                    gid=f"series-{i}", label=name, **kw)
            pts = [(r["density"], r["model_seconds"] * 1e3) for r in g
                   if r["model_seconds"] is not None]
            if pts:
                ax.plot(*zip(*pts), "--", color=kw["color"], lw=kw["lw"])
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
        pl.legend(fig, styles, series, extra=extra)
        fid = slug("model", "P", k[0], "N", k[1], k[2], k[3], k[4])
        figs.append(Fig(fid, "Measured vs cost model vs lower bound",
                        f"measured vs cost model, {what}. " + MODEL_LINES + series_text(grp),
                        *render(fig, fid), grp))
    return figs


# what the model figure's lines are (each label of REFERENCES and the dashed lines), for its
# caption: a line a reader cannot look up is no use
MODEL_LINES = (
    "Solid lines: the measured median per algorithm. cost model (dashed, the algorithm's "
    "colour): the calibrated cost model's prediction for that algorithm. RS+AG volume "
    "(gray, dash-dot): the time of the bytes a reduce-scatter of the inputs plus an allgather "
    "of the result move per rank, (P - 1)/P (k + K) (index + value bytes), at the calibrated "
    "seconds per byte: what the split algorithms' traffic costs without latency or compute. "
    "lower bound (gray, dotted): the bytes every rank must receive at least, (K - k) (index + "
    "value bytes), at the same rate (k: nonzeros per rank, K: nonzeros of the result).")

MODELED_ONLY = "; modeled only"  # :func:`sparcapps.report.fmt.network_label`'s mark


def on_simulated_axes(rows) -> list[dict]:
    """``rows`` with the modeled-only rows of a simulation (``sparc-bench --simulate``'s
    ``"modeled_only": true``: the dense baseline past ``--sim-dense-memory``, ``--model-only``
    algorithms) moved onto their simulation's axes: the same source (network), as their own
    series ``NAME (modeled)`` (dotted, :data:`plotting.MODELED_MARKER`), so that the sparse /
    dense comparison reads off one y axis."""
    out = []
    for r in rows:
        net = r["network"]
        if r["simulated"] and isinstance(net, str) and net.endswith(MODELED_ONLY):
            r = {**r, "network": net[:-len(MODELED_ONLY)], "series": r["series"] + pl.MODELED}
        out.append(r)
    return out


def collective_figures(rows) -> list[Fig]:
    """Every collective figure the rows support, in report order (modeled-only rows on their
    simulation's axes, :func:`on_simulated_axes`)."""
    rows = on_simulated_axes(rows)
    styles = pl.SeriesStyles([r["series"] for r in rows], dense_name())
    return (_scaling(rows, styles, "strong") + _scaling(rows, styles, "weak")
            + _speedup(rows, styles) + _vs_density(rows, styles) + _model(rows, styles))


def speedup_text(r) -> str:
    if r["speedup"] is None:
        return ""
    if r["speedup_lo"] is None:
        return sig(r["speedup"])
    return f"{sig(r['speedup'])} ({sig(r['speedup_lo'], 2)}\u2013{sig(r['speedup_hi'], 2)})"
