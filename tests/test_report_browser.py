"""The HTML report in a real browser: headless Chromium from the distribution's packages renders
it at two window widths, and a script injected into a copy of the page writes what it measured
into the DOM (``--dump-dom``): no table or code block wider than its container, every image
decoded (naturalWidth > 0) from the page itself (no file beside it).

Installs ``chromium-headless-shell`` with apt when missing and running as root (as
tests/test_slurm.py does with Slurm); skipped with the reason otherwise.
"""

import json
import os
import re
import shutil
import subprocess

import pytest

from sparcapps.records import append_record, make_record
from sparcapps.report import build_report

from test_report import ENV, _bench

_BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")

_CHECK = """<script>
window.addEventListener('load', function () {
  var out = {tables: [], images: [], pres: [], width: document.body.clientWidth};
  function box(el) { return el.getBoundingClientRect(); }
  var right = box(document.body).right + 1;
  document.querySelectorAll('table').forEach(function (t, i) {
    var c = t.parentElement;
    out.tables.push({i: i, right: box(t).right, container: box(c).right,
                     scroll: c.scrollWidth, client: c.clientWidth,
                     fits: box(t).right <= Math.min(box(c).right, right) + 1
                           && c.scrollWidth <= c.clientWidth + 1});
  });
  document.querySelectorAll('pre').forEach(function (p, i) {
    out.pres.push({i: i, fits: p.scrollWidth <= p.clientWidth + 1 && box(p).right <= right});
  });
  document.querySelectorAll('img').forEach(function (im, i) {
    out.images.push({i: i, complete: im.complete, width: im.naturalWidth,
                     shown: box(im).width, data: im.src.slice(0, 15) === 'data:image/png;'});
  });
  var pre = document.createElement('pre');
  pre.id = 'sparc-checks';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def _browser():
    for name in _BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "install", "-y", "-qq", "chromium-headless-shell"],
                ["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "chromium-headless-shell"]):
        done = subprocess.run(cmd, env=env, capture_output=True, timeout=900)
        if cmd[1] == "install" and done.returncode == 0:
            break
    return shutil.which("chromium-headless-shell")


@pytest.fixture(scope="module")
def browser():
    path = _browser()
    if path is None:
        pytest.skip("no Chromium: install the distribution's chromium-headless-shell (this "
                    "test installs it itself when running as root with apt-get)")
    return path


def _measure(browser, html_path, width, tmp_path):
    page = tmp_path / f"checked-{width}.html"
    page.write_text(html_path.read_text().replace("</body>", _CHECK + "</body>"))
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
         f"--window-size={width},900", "--virtual-time-budget=10000", "--dump-dom",
         page.as_uri()],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "HOME": str(tmp_path)})
    m = re.search(r"<pre id=\"sparc-checks\">(.*?)</pre>", proc.stdout, re.S)
    assert m, f"no checks in the dumped DOM (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def test_report_renders_in_chromium(browser, tmp_path):
    path = tmp_path / "r.jsonl"
    long_cmd = ["sparc-bench", "--output", "/a/very/long/path/" * 8 + "records.jsonl"]
    sim = {"command": ["sparc-bench", "--simulate", "2", "64", "--network", "1gbit"],
           "launcher": None}
    for P in (2, 8):
        for alg, t in (("dense", 1e-2 * P), ("ssar_split_allgather", 3e-3 * P),
                       ("dsar_split_allgather", 4e-3 * P), ("allgather", 5e-3 * P)):
            append_record(path, _bench(P, 0.01, alg, t, env={"command": long_cmd},
                                       model={"predicted_s": t, "floor_s": t / 3,
                                              "rs_ag_s": t / 2}))
    for P in (2, 8, 64):
        for alg, t in (("dense", 1e-2 * P), ("ssar_split_allgather", 3e-3 * P)):
            rec = _bench(P, 0.01, alg, t, env=sim, N=4096)
            rec.update(simulated=True, network="1gbit")
            append_record(path, rec)
    epochs = [{"epoch": e, "wall_seconds": e, "test_accuracy": 0.5 + e / 10} for e in (1, 2)]
    append_record(path, make_record("sparc-linear", config={"synth": "url", "rows": 3000},
                                    environment=ENV, P=2, algorithm="ssar_split_allgather",
                                    density=0.001, metrics={"epochs": epochs}))
    append_record(path, make_record("sparc-bench", config={"command": long_cmd},
                                    environment=ENV, P=4, status="failed",
                                    error="x" * 300 + "\nkilled"))
    out = tmp_path / "report"
    build_report([path], out)
    html = out / "report.html"
    # self-contained: the page alone, moved away from its PNG files
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(html, alone / "report.html")
    for width in (1280, 800):
        checks = _measure(browser, alone / "report.html", width, tmp_path)
        assert checks["tables"] and checks["images"], checks
        too_wide = [t for t in checks["tables"] if not t["fits"]]
        assert not too_wide, f"tables overflow at width {width}: {too_wide}"
        assert all(p["fits"] for p in checks["pres"]), checks["pres"]
        broken = [im for im in checks["images"]
                  if not (im["complete"] and im["width"] > 0 and im["data"] and im["shown"] > 0)]
        assert not broken, f"images not loaded at width {width}: {broken}"
