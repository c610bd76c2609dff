"""A tiny document model rendered to Markdown (figures as PNG and SVG files beside it) and to
one self-contained HTML file (figures inline as SVG, scaled to the page; tables that wrap)."""

from __future__ import annotations

import html
import re
from pathlib import Path

__all__ = ["Doc", "CSS"]

CSS = """
body{font-family:sans-serif;max-width:72em;margin:auto;padding:0 1em;line-height:1.35}
.tbl{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:0.85em;margin:0.5em 0}
@media (max-width:60em){table{font-size:0.75em}}
td,th{border:1px solid #bbb;padding:2px 4px;overflow-wrap:break-word;vertical-align:top}
th{background:#eee}
td.num{text-align:right}
pre{background:#f4f4f4;padding:6px;white-space:pre-wrap;overflow-wrap:anywhere}
img,figure svg{max-width:100%;height:auto}
figure svg{display:block}
.side{display:flex;flex-wrap:wrap;gap:1em}
.side figure{flex:1 1 30em;margin:0;min-width:0}
figcaption{font-size:0.85em;color:#444}
"""


def _breakable(value) -> str:
    """A cell's text, escaped, with line-break opportunities after '_', '/' and ',' (names
    like ssar_split_allgather and paths wrap there, not in the middle of a word) and inside
    runs of more than 24 characters without one (a long token must not widen the table)."""
    pieces, run = [""], 0
    for ch in "" if value is None else str(value):
        pieces[-1] += ch
        run = 0 if ch.isspace() else run + 1
        if ch in "_/," or run >= 24:
            pieces.append("")
            run = 0
    return "<wbr>".join(html.escape(piece) for piece in pieces if piece)


def _numeric(value) -> str:
    """A numeric cell's text, escaped; a range may break after its dash (0.360\u2013 0.440)."""
    return html.escape("" if value is None else str(value)).replace("\u2013", "\u2013<wbr>")


def _inline_svg(svg: bytes, name: str, alt: str) -> str:
    """An SVG file's ``<svg>`` element (no XML prolog or doctype) for an HTML page: its ids
    prefixed with ``name`` (several figures in one page must not share one), labelled with
    ``alt`` for screen readers."""
    text = svg.decode()
    text = text[text.index("<svg"):]
    p = re.sub(r"[^A-Za-z0-9_-]", "_", name) + "-"
    text = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{p}{m.group(1)}"', text)
    text = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{p}{m.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{p}{m.group(1)})", text)
    return re.sub(r"^<svg\b", f"<svg role='img' aria-label='{html.escape(alt)}'", text)


class Doc:
    """Blocks -> Markdown and HTML. Table cells are strings; ``numeric`` columns align right."""

    def __init__(self):
        self.blocks: list[tuple] = []

    def h(self, level: int, text: str, anchor: str | None = None) -> None:
        self.blocks.append(("h", level, text, anchor))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, headers: list[str], rows: list[list], numeric: set[int] = frozenset()
              ) -> None:
        self.blocks.append(("table", headers, rows, set(numeric)))

    def img(self, name: str, png: bytes, svg: bytes, alt: str) -> None:
        """A figure: ``name``.png and ``name``.svg beside report.md (Markdown shows the PNG and
        links the SVG); the HTML carries the SVG inline."""
        self.blocks.append(("img", [(name, png, svg, alt)]))

    def side_by_side(self, images: list[tuple[str, bytes, bytes, str]]) -> None:
        self.blocks.append(("img", images))

    def code(self, text: str) -> None:
        self.blocks.append(("code", text))

    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "table":
                def cell(v):
                    return ("" if v is None else str(v)).replace("|", "\\|").replace("\n", " ")
                out.append("\n".join(["| " + " | ".join(b[1]) + " |",
                                      "|" + "---|" * len(b[1]),
                                      *("| " + " | ".join(cell(v) for v in row) + " |"
                                        for row in b[2])]))
            elif b[0] == "img":
                out.append("\n\n".join(f"![{alt}]({name}.png)\n\n(vector: [{name}.svg]"
                                         f"({name}.svg))" for name, _, _, alt in b[1]))
            elif b[0] == "code":
                out.append("```\n" + b[1] + "\n```")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        e = html.escape
        out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'>"
               f"<meta name='viewport' content='width=device-width'><title>{e(title)}</title>"
               f"<style>{CSS}</style></head><body>"]
        for b in self.blocks:
            if b[0] == "h":
                anchor = f" id='{e(b[3])}'" if b[3] else ""
                out.append(f"<h{b[1]}{anchor}>{e(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{e(b[1])}</p>")
            elif b[0] == "table":
                nums = b[3]
                out.append("<div class='tbl'><table><tr>"
                           + "".join(f"<th>{e(h)}</th>" for h in b[1]) + "</tr>")
                out.extend("<tr>" + "".join(
                    f"<td class=num>{_numeric(v)}</td>" if i in nums
                    else f"<td>{_breakable(v)}</td>"
                    for i, v in enumerate(row)) + "</tr>" for row in b[2])
                out.append("</table></div>")
            elif b[0] == "img":
                figs = "".join(f"<figure>{_inline_svg(svg, name, alt)}"
                               f"<figcaption>{e(alt)}</figcaption></figure>"
                               for name, _, svg, alt in b[1])
                out.append(f"<div class='side'>{figs}</div>")
            elif b[0] == "code":
                out.append(f"<pre>{e(b[1])}</pre>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"

    def write(self, out: Path, title: str) -> Path:
        """``out/report.md`` (+ the PNG and SVG files it names) and ``out/report.html``."""
        for b in self.blocks:
            if b[0] == "img":
                for name, png, svg, _ in b[1]:
                    (out / f"{name}.png").write_bytes(png)
                    (out / f"{name}.svg").write_bytes(svg)
        md = out / "report.md"
        md.write_text(self.markdown())
        (out / "report.html").write_text(self.html(title))
        return md
