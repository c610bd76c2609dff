"""The HTML report as a reviewer sees it: ``sparc-report`` renders records that exercise wide
figures, many configurations, measured beside simulated rows, coinciding lines and a P = 1-only
run; headless Chromium (the distribution's package, driven by Playwright) opens the pages at two
window widths and measures, in the page itself:

- no table or code block wider than its container; every figure an inline SVG drawn at the
  aspect of its viewBox (the page alone, moved away from the files beside it);
- every text of every figure (titles, labels, ticks, legend entries) inside the figure's box:
  nothing clipped at an edge; no two texts overlapping;
- every legend clear of the data (lines sampled every few pixels inside the axes, markers,
  error bars), of the other texts and of the other legends;
- every data marker inside its axes; no configuration's markers all drawn on another's (a
  line hidden under another).

Chromium: ``/usr/bin/chromium`` or another on PATH; when missing and running as root with
apt-get (as CI does) the test installs Debian's ``chromium`` itself, else it is skipped with the
reason. Playwright comes with the ``[test]`` extra; ``playwright install`` is never needed.
"""

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from sparcapps.records import append_record, make_record, summarize

from test_report import ENV

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chromium-headless-shell")
_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _browser():
    for name in _BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = []
    for cmd in (["apt-get", "install", "-y", "-qq", "chromium"], ["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "chromium"]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        log.append(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr[-2000:]}")
        if cmd[1] == "install" and done.returncode == 0:
            break
    path = shutil.which("chromium")
    assert path, "could not install Chromium with apt-get:\n" + "\n".join(log)
    return path


@pytest.fixture(scope="module")
def browser():
    path = _browser()
    if path is None:
        pytest.skip("no Chromium and not root with apt-get to install it: install the "
                    "distribution's chromium (CI, as root, installs it in this test)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=_ARGS)
        try:
            yield b
        finally:
            b.close()


# -- records a reviewer looks at ----------------------------------------------------------

N = 16777216
_ALGS = {"dense": 1.0, "ssar_split_allgather": 0.1, "dsar_split_allgather": 0.1,
         "ssar_recursive_double": 0.15, "allgather": 0.3}


def _rec(P, alg, median, *, N=N, density=0.001, reps=3, spread=0.2, env=None,
         pattern="random", **metrics):
    """A sparc-bench record on one node: ``reps`` repetitions spread +-``spread``."""
    samples = [median * (1 + spread * (2 * i / (reps - 1) - 1)) for i in range(reps)]
    return make_record("sparc-bench", config={"pattern": pattern, "dtype": "float32"},
                       environment={**ENV, "hosts": ["n0"], **(env or {})}, P=P, N=N,
                       density=density, algorithm=alg, timings={"allreduce": summarize(samples)},
                       metrics=metrics, bytes={"sent_per_rank": 8 * P})


def _review_records(path):
    """Measured on one node at P = 2, 4, 8 (ten configurations, two with identical times, P = 2
    with a wide spread, bars only for those with 10 repetitions), simulated at 94 Gbit up to
    P = 1,024 for the same input, a density sweep with the cost model (the wide figure), one
    whose input makes a long title, a training run with a long configuration, a failed run with
    a long error."""
    long_cmd = ["sparc-bench", "--output", "/a/very/long/path/" * 8 + "records.jsonl"]
    for P in (2, 4, 8):
        for alg, f in _ALGS.items():
            reps = 10 if alg in ("dense", "ssar_split_allgather") else 3
            append_record(path, _rec(P, alg, 0.05 * P * f, reps=reps,
                                     spread=0.9 if P == 2 else 0.1, env={"command": long_cmd}))
        for bits in (2, 4, 8):
            append_record(path, _rec(P, "ssar_split_allgather", 0.005 * P * (1 - bits / 20),
                                     bits=bits))
        append_record(path, _rec(P, "ssar_split_allgather", 0.004 * P, bits=4,
                                 quantize_sparse=True, nonblocking=True, reuse_output=True))
    sim = {"command": ["sparc-bench", "--simulate", "2", "1024", "--network", "94gbit"],
           "launcher": None}
    for P in (2, 16, 128, 1024):
        for alg, f in (("dense", 1.0), ("ssar_split_allgather", 0.02), ("allgather", 0.5)):
            rec = _rec(P, alg, 1e-3 * P * f, env=sim)
            rec.update(simulated=True, network="94gbit")
            append_record(path, rec)
    for d in (0.0001, 0.001, 0.01, 0.1):
        for alg, f in (("dense", 1.0), ("ssar_split_allgather", 10 * d), ("allgather", 20 * d)):
            t = 0.2 * f
            append_record(path, _rec(4, alg, t, N=N // 4, density=d, model={
                "predicted_s": t * 0.8, "floor_s": t * 0.3, "rs_ag_s": t * 0.5}))
    long_pattern = ("replay of the gradients of a large model recorded at epoch three of "
                    "a long training run on a cluster far away")  # a title of three lines
    for d in (0.001, 0.01):
        for alg, f in (("dense", 1.0), ("ssar_split_allgather", 30 * d)):
            append_record(path, _rec(2, alg, 0.01 * f, N=65536, density=d, pattern=long_pattern))
    epochs = [{"epoch": e, "wall_seconds": e, "test_accuracy": 0.5 + e / 10} for e in (1, 2, 3)]
    for dense in (True, False):
        append_record(path, make_record(
            "sparc-linear", config={"synth": "url", "rows": 3000, "bits": 4, "dense": dense,
                                    "no_error_feedback": True},
            environment=ENV, P=2, algorithm="ssar_split_allgather", density=0.00271406,
            metrics={"epochs": epochs}))
    append_record(path, make_record("sparc-bench", config={"command": long_cmd},
                                    environment=ENV, P=4, status="failed",
                                    error="x" * 300 + "\nkilled"))


def _p1_records(path):
    for alg, t in (("dense", 0.0271), ("ssar_split_allgather", 0.0001), ("allgather", 0.0002)):
        append_record(path, _rec(1, alg, t))


def _sparc_report(records, out):
    script = Path(sys.executable).parent / "sparc-report"
    done = subprocess.run([str(script), str(records), "-o", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return out / "report.html"


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """The two reports' HTML pages, each copied alone into a directory of its own."""
    tmp = tmp_path_factory.mktemp("reports")
    pages = {}
    for name, make in (("review", _review_records), ("p1", _p1_records)):
        make(tmp / f"{name}.jsonl")
        html = _sparc_report(tmp / f"{name}.jsonl", tmp / name)
        alone = tmp / f"{name}-alone"
        alone.mkdir()
        shutil.copy(html, alone / "report.html")
        pages[name] = alone / "report.html"
    return pages


# -- what the page measures ---------------------------------------------------------------

_MEASURE = r"""() => {
  const R = el => { const r = el.getBoundingClientRect();
                    return {l: r.left, t: r.top, r: r.right, b: r.bottom}; };
  const inside = (a, b, tol) => a.l >= b.l - tol && a.t >= b.t - tol
                                && a.r <= b.r + tol && a.b <= b.b + tol;
  const meets = (a, b, tol) => a.l < b.r - tol && b.l < a.r - tol
                               && a.t < b.b - tol && b.t < a.b - tol;
  const hit = (p, a) => p.x > a.l && p.x < a.r && p.y > a.t && p.y < a.b;
  const out = {tables: [], pres: [], figures: [], text: document.body.innerText};
  const right = R(document.body).r + 1;
  document.querySelectorAll('table').forEach((t, i) => {
    const c = t.parentElement;
    out.tables.push({i, fits: R(t).r <= Math.min(R(c).r, right) + 1
                              && c.scrollWidth <= c.clientWidth + 1});
  });
  document.querySelectorAll('pre').forEach((p, i) => {
    out.pres.push({i, fits: p.scrollWidth <= p.clientWidth + 1 && R(p).r <= right});
  });
  document.querySelectorAll('figure > svg').forEach(svg => {
    const fig = {name: svg.getAttribute('aria-label'), problems: [], texts: 0, legends: 0,
                 series: 0, samples: 0};
    const box = R(svg);
    const vb = svg.viewBox.baseVal;
    fig.width = box.r - box.l;
    if (!(vb.width > 0) || Math.abs((box.r - box.l) / (box.b - box.t)
                                    - vb.width / vb.height) > 0.02)
      fig.problems.push('drawn at another aspect than its viewBox');
    const id = el => el.id.replace(/^.*?-(?=[a-zA-Z]+[_-]\d+$)/, '');
    const groups = [...svg.querySelectorAll('g[id]')];
    const texts = groups.filter(g => /^text_\d+$/.test(id(g)));
    const legends = groups.filter(g => /^legend_\d+$/.test(id(g)));
    const axes = groups.filter(g => /^axes_\d+$/.test(id(g)));
    fig.texts = texts.length; fig.legends = legends.length;
    const tb = texts.map(g => ({g, r: R(g)})).filter(x => x.r.r > x.r.l);
    tb.forEach(x => {
      if (!inside(x.r, box, 0.5))
        fig.problems.push('text outside the figure: ' + JSON.stringify(x.r) + ' in '
                          + JSON.stringify(box));
    });
    for (let i = 0; i < tb.length; i++)
      for (let j = i + 1; j < tb.length; j++)
        if (meets(tb[i].r, tb[j].r, 0.5))
          fig.problems.push('texts overlap: ' + JSON.stringify([tb[i].r, tb[j].r]));
    // what the data look like on the page: points along the drawn paths inside the axes
    const data = [];
    const series = [];
    axes.forEach(ax => {
      const patch = [...ax.children].find(c => /^patch_\d+$/.test(id(c)));
      const area = R(patch);
      [...ax.children].filter(c => /^(line2d|LineCollection|series)[_-]\d+$/.test(id(c)))
        .forEach(g => {
          const pts = [];
          g.querySelectorAll('path').forEach(p => {
            if (!/\d/.test(p.getAttribute('d') || '')) return;  // an empty path
            const n = p.getTotalLength(), m = p.getScreenCTM();
            for (let s = 0; s <= n; s += 1.5) {
              const q = p.getPointAtLength(s).matrixTransform(m);
              if (q.x >= area.l && q.x <= area.r && q.y >= area.t && q.y <= area.b)
                pts.push({x: q.x, y: q.y});
            }
          });
          const marks = [...g.querySelectorAll('use')].map(u => {
            const r = R(u); return {x: (r.l + r.r) / 2, y: (r.t + r.b) / 2, r};
          });
          marks.forEach(u => pts.push({x: u.x, y: u.y}));
          data.push(...pts);
          if (/^series-\d+$/.test(id(g)) && marks.length) series.push({ax, marks});
          marks.filter(u => !hit(u, {l: area.l - 1, t: area.t - 1, r: area.r + 1,
                                      b: area.b + 1}))
            .forEach(u => fig.problems.push('a data point drawn outside its axes: '
                                            + JSON.stringify(u)));
        });
    });
    fig.samples = data.length; fig.series = series.length;
    legends.forEach((lg, k) => {
      const lr = R(lg);
      if (!inside(lr, box, 0.5)) fig.problems.push('legend outside the figure');
      const under = data.filter(p => hit(p, lr));
      if (under.length)
        fig.problems.push(`legend ${k} covers ${under.length} data points, e.g. `
                          + JSON.stringify(under[0]));
      tb.filter(x => !lg.contains(x.g) && meets(x.r, lr, 0.5)).forEach(x =>
        fig.problems.push(`legend ${k} covers a text: ` + x.g.textContent.trim()));
      legends.slice(k + 1).forEach(o => {
        if (meets(lr, R(o), 0.5)) fig.problems.push('legends overlap');
      });
    });
    for (let i = 0; i < series.length; i++)
      for (let j = 0; j < series.length; j++) {
        const a = series[i], b = series[j];
        if (i === j || a.ax !== b.ax) continue;
        if (a.marks.every(u => b.marks.some(v => Math.hypot(u.x - v.x, u.y - v.y) < 1.5)))
          fig.problems.push(`a line's markers all lie on another's (series ${i} on ${j})`);
      }
    out.figures.push(fig);
  });
  return out;
}"""


def _measure(browser, html, width):
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        return page.evaluate(_MEASURE)
    finally:
        page.close()


@pytest.mark.parametrize("width", [1280, 800])
def test_report_renders_in_chromium(browser, reports, width):
    checks = _measure(browser, reports["review"], width)
    assert checks["tables"], "no tables"
    too_wide = [t for t in checks["tables"] if not t["fits"]]
    assert not too_wide, f"tables overflow at width {width}: {too_wide}"
    assert all(p["fits"] for p in checks["pres"]), checks["pres"]
    figs = checks["figures"]
    names = " | ".join(f["name"] for f in figs)
    # strong and speedup (measured and simulated panels), density (two inputs), model,
    # training; no weak scaling: N/P = 2^20 has one P per source, no line to draw
    assert len(figs) == 6, names
    for f in figs:
        # the checks looked at something: texts, one legend, lines sampled
        assert f["texts"] > 10 and f["legends"] == 1 and f["samples"] > 5, f
        assert f["width"] <= width, f
        assert not f["problems"], f"{f['name']} at width {width}:\n" + "\n".join(f["problems"])
    measured_and_simulated = [f for f in figs if "do not compare" in f["name"]]
    assert len(measured_and_simulated) == 2, names
    assert any(f["series"] >= 10 for f in figs), [f["series"] for f in figs]


def test_p1_only_report_in_chromium(browser, reports):
    checks = _measure(browser, reports["p1"], 1280)
    assert "claims none" in checks["text"] and "none (P = 1)" in checks["text"]
    assert "271" not in checks["text"]  # 27.1 ms / 0.1 ms at P = 1 is no speedup
    assert not checks["figures"]  # one P: no scaling, no speedup


def test_checks_find_clipped_text_and_covered_data(browser, tmp_path):
    """The measurements can fail: a title running off the figure, a legend over the lines and
    two lines drawn on each other, each found."""
    from matplotlib.figure import Figure

    from sparcapps.report.doc import Doc

    fig = Figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.plot([1, 2, 3], [1, 2, 3], "o-", gid="series-0")
    ax.plot([1, 2, 3], [1, 2, 3], "s-", gid="series-1")
    ax.set_title("a title far too long for a figure of this width, cut at both ends " * 2)
    ax.legend(["a", "b"], loc="center")
    svg = io.BytesIO()
    fig.savefig(svg, format="svg")
    doc = Doc()
    doc.img("bad", b"", svg.getvalue(), "a bad figure")
    (tmp_path / "report.html").write_text(doc.html("bad"))
    problems = "\n".join(_measure(browser, tmp_path / "report.html", 1280)["figures"][0]
                         ["problems"])
    assert "text outside the figure" in problems
    assert "legend 0 covers" in problems and "data points" in problems
    assert "markers all lie on another's" in problems
