"""Render a report as one HTML page and a Markdown twin (figures linked beside it). Plain
data in, text out: no lake access but each figure's SVG file.

A page opens with its findings, one folded line each (the few numbers that answer each
topic's question, linked to its section; opened, every line), then a table of contents,
then the sections in the order given. It stays readable however much the lake holds:

- **Bounded.** Figures are embedded as their SVG files (``data:`` URIs), so the page stands
  alone; but it never grows past ``PAGE_LIMIT_BYTES``: visible figures first, then folded
  ones, each in page order, are embedded while the page stays under it, and the others are
  linked to their files under ``figures/`` beside the page, which says how many.
- **Short.** A section shows its first ``OPEN_FIGURES`` figures; the rest fold under them
  (``<details>``). Long tables fold too, and each column has one number format
  (``analysis.report_tables``); the Markdown twin holds every row."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple
from urllib.parse import quote

import pandas as pd

from analysis.figures.common import DPI
from analysis.report_tables import html_table, markdown_table

__all__ = ["FigureEntry", "Section", "Finding", "Topic", "figure_topic", "anchor_of", "render_html", "render_markdown",
           "PAGE_LIMIT_BYTES", "OPEN_FIGURES"]

#: The most bytes (UTF-8) a page holds: figures past it are linked, not embedded.
PAGE_LIMIT_BYTES = 2_000_000
#: Figures of a section shown open; the rest fold under them.
OPEN_FIGURES = 2
#: What an SVG's text must be written as in a ``data:`` URI between single quotes: the URI's
#: own delimiters (``%``, ``#``), the attribute's (``'``, and ``&``, which HTML would read as a
#: character reference), and the white space a URL parser drops; other ASCII stays as it is.
_URI_ESCAPES = tuple((c, f"%{ord(c):02X}") for c in "%#'&\n\r\t")  # "%" first: it escapes the others
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


@dataclass(frozen=True)
class FigureEntry:
    """One figure of the report: written (``files``: PNG then SVG) or ``skipped`` (a line
    naming the command that produces its rows); ``drawn`` is False for a figure reused
    unchanged from the former report in the same folder, ``drawn_at`` when it was drawn (UTC)."""

    name: str
    title: str
    about: str = ""
    files: Tuple[Path, ...] = ()
    skipped: Optional[str] = None
    drawn: bool = True
    drawn_at: str = ""


def anchor_of(text: str) -> str:
    """An HTML id from ``text``: lower case, runs of other characters as one dash."""
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split()) or "section"


@dataclass
class Section:
    """A heading, its prose, its figures and its tables (title, frame); ``anchor`` is the
    heading's id (from the title unless given)."""

    title: str
    intro: str = ""
    figures: List[FigureEntry] = field(default_factory=list)
    tables: List[Tuple[str, pd.DataFrame]] = field(default_factory=list)
    anchor: str = ""

    def __post_init__(self) -> None:
        self.anchor = self.anchor or anchor_of(self.title)


@dataclass(frozen=True)
class Finding:
    """What one topic found, in a few lines of numbers, linked to its section by ``anchor``."""

    title: str
    anchor: str
    lines: Tuple[str, ...]


@dataclass(frozen=True)
class Topic:
    """One question the lake answers (a sweep on a hardware, a layout search, a calibration):
    its finding (None where it has no rows), its section, the names it answers to (sweeps,
    studies, calibrations) and when it was recorded (seconds since the epoch; 0 if unknown)."""

    section: Section
    finding: Optional[Finding] = None
    names: FrozenSet[str] = frozenset()
    recorded: float = 0.0


def figure_topic(section: Section, entry, rows, column: str, lines: Callable[[], Sequence[str]],
                 when: Callable[[Iterable[str]], float]) -> Topic:
    """A topic of one figure ``entry`` (a ``FigureCache`` entry) drawn from ``rows``: the
    section alone where the figure was skipped for want of rows, else with a finding of
    ``lines()`` titled as the section, answering to the names in ``rows[column]``."""
    section.figures.append(entry)
    if entry.skipped:
        return Topic(section)
    names = frozenset(str(v) for v in rows[column].dropna().unique())
    return Topic(section, Finding(section.title, section.anchor, tuple(lines())), names, when(names))


_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
h2#findings { margin-top: .8em; } .intro { margin-top: 0; color: #444; font-size: .92em; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: .92em; color: #333; } figcaption a { font-size: .85em; }
table { border-collapse: collapse; font-size: .85em; margin: .6em 0 1.2em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th:first-child, td:first-child { text-align: left; } caption { text-align: left; font-weight: 600; padding: .3em 0; }
.skipped { color: #8a5a00; } code { background: #f4f4f4; padding: 0 .25em; } ol.toc { columns: 2; }
details.more { margin: -.6em 0 1.2em; } details.more > summary { cursor: pointer; color: #0645ad; font-size: .9em; }
details.finding { margin: .35em 0; }
details.finding > summary { cursor: pointer; list-style: none; display: -webkit-box; -webkit-box-orient: vertical;
                            -webkit-line-clamp: 2; line-clamp: 2; overflow: hidden; }
details.finding > summary::-webkit-details-marker { display: none; }
details.finding > summary::before { content: "\\25B8 "; color: #777; }
details.finding[open] > summary::before { content: "\\25BE "; }
details.finding[open] > summary .lead { display: none; } details.finding ul { margin: .2em 0 .6em; }
"""


def _shown_width(path: Path) -> str:
    """The ``width`` attribute showing the SVG at ``path`` as large as its PNG (110 dpi; its
    width in points, as matplotlib writes it), or nothing if it says no width."""
    with open(path, encoding="utf-8") as handle:
        head = handle.read(600)
    found = re.search(r'<svg[^>]*\swidth="([0-9.]+)pt"', head)
    return f' width="{round(float(found.group(1)) * DPI / 72)}"' if found else ""


def _svg_uri(path: Path) -> str:
    """The SVG file at ``path`` as a ``data:`` URI to write between single quotes (non-ASCII
    characters as their UTF-8 bytes, percent-encoded)."""
    text = path.read_text(encoding="utf-8")
    for char, escaped in _URI_ESCAPES:
        text = text.replace(char, escaped)
    return "data:image/svg+xml," + _NON_ASCII.sub(lambda m: quote(m.group(0), safe=""), text)


def _html_figure(entry: FigureEntry, uri: Optional[str]) -> str:
    """A figure: its SVG embedded (``uri``: ``_svg_uri`` of its file) or, without it, linked to
    its file beside the page."""
    if entry.skipped:
        return (f'<p class="skipped" id="{html.escape(entry.name)}">Skipped: <b>{html.escape(entry.title)}</b> '
                f"({html.escape(entry.skipped)}).</p>")
    png, svg = entry.files
    source = uri or f"figures/{quote(svg.name)}"
    where = "" if uri else " (linked: its file is beside the page, not in it)"
    return (f'<figure id="{html.escape(entry.name)}">'
            f"<img src='{source}'{_shown_width(svg)} alt=\"{html.escape(entry.title)}\">"
            f"<figcaption><b>{html.escape(entry.title)}.</b> {html.escape(entry.about)}{where} "
            f'<a href="figures/{svg.name}">SVG</a> <a href="figures/{png.name}">PNG</a></figcaption></figure>')


def _html_head(findings: Sequence[Finding], sections: Sequence[Section]) -> List[str]:
    """The findings, one folded line each (title and first line; opened, every line), then
    the table of contents."""
    parts = ['<h2 id="findings">Findings</h2>']
    if not findings:
        parts.append("<p>The lake holds no rows to find anything in yet.</p>")
    for finding in findings:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in finding.lines)
        lead = html.escape(finding.lines[0]) if finding.lines else ""
        parts.append(f'<details class="finding"><summary><a href="#{finding.anchor}"><b>{html.escape(finding.title)}'
                     f'</b></a><span class="lead">: {lead}</span></summary><ul>{items}</ul></details>')
    toc = "".join(f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections)
    parts.append(f'<h2 id="contents">Contents</h2><ol class="toc">{toc}</ol>')
    return parts


def _html_section(section: Section, embedded: Dict[str, Optional[str]]) -> List[str]:
    """A section: heading, prose, its first ``OPEN_FIGURES`` figures, the rest folded, its tables."""
    parts = [f'<h2 id="{section.anchor}">{html.escape(section.title)}</h2>']
    if section.intro:
        parts.append(f"<p>{html.escape(section.intro)}</p>")
    shown = [f for f in section.figures if not f.skipped]
    open_ = [f for f in section.figures if f.skipped or f in shown[:OPEN_FIGURES]]
    parts.extend(_html_figure(f, embedded.get(f.name)) for f in open_)
    folded = [f for f in section.figures if f not in open_]
    if folded:
        figures = "".join(_html_figure(f, embedded.get(f.name)) for f in folded)
        parts.append(f'<details class="more"><summary>{len(folded)} more figures: '
                     f'{html.escape("; ".join(f.title for f in folded))}</summary>{figures}</details>')
    parts.extend(html_table(t, frame) for t, frame in section.tables)
    return parts


def _page(title: str, intro: str, sections: Sequence[Section], findings: Sequence[Finding],
          embedded: Dict[str, Optional[str]], note: str) -> str:
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f'<p class="intro">{html.escape(intro)}{html.escape(note)}</p>']
    parts += _html_head(findings, sections)
    for section in sections:
        parts += _html_section(section, embedded)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _embedding(sections: Sequence[Section], room: int) -> Dict[str, Optional[str]]:
    """The ``data:`` URI of each figure to embed in ``room`` bytes beyond the page with every
    figure linked (None for the others): the open ones, then the folded ones, each in page
    order, while each next one fits."""
    entries = [(i >= OPEN_FIGURES, f) for s in sections for i, f in enumerate(f for f in s.figures if not f.skipped)]
    embedded: Dict[str, Optional[str]] = {f.name: None for _, f in entries}
    for _, entry in sorted(entries, key=lambda e: e[0]):  # stable: page order within each
        uri = _svg_uri(entry.files[1])
        cost = _size(_html_figure(entry, uri)) - _size(_html_figure(entry, None))
        if cost > room:
            break
        embedded[entry.name], room = uri, room - cost
    return embedded


def _linked_note(count: int, limit: int) -> str:
    """What the intro says of ``count`` figures linked, not embedded (nothing when none is)."""
    return (f" {count} figures are linked to their files under figures/ beside this page, not embedded in it, to "
            f"keep it under {limit / 1e6:g} MB." if count else "")


def render_html(title: str, intro: str, sections: Sequence[Section], findings: Sequence[Finding] = (), *,
                limit: int = PAGE_LIMIT_BYTES) -> str:
    """The whole page: the findings, the contents, then ``sections``; figures embedded as
    ``data:`` URIs of their SVG files while the page stays under ``limit`` bytes, the
    others linked to their files beside it (the intro says how many)."""
    figures = [f for s in sections for f in s.figures if not f.skipped]
    linked: Dict[str, Optional[str]] = {f.name: None for f in figures}
    room = limit - _size(_page(title, intro, sections, findings, linked, _linked_note(len(figures), limit)))
    embedded = _embedding(sections, room)
    note = _linked_note(sum(uri is None for uri in embedded.values()), limit)
    return _page(title, intro, sections, findings, embedded, note)


def _md_head(findings: Sequence[Finding], sections: Sequence[Section]) -> List[str]:
    parts = ["", '<a id="findings"></a>', "", "## Findings"]
    if not findings:
        parts += ["", "The lake holds no rows to find anything in yet."]
    for finding in findings:
        parts += ["", f"**[{finding.title}](#{finding.anchor})**", ""] + [f"- {line}" for line in finding.lines]
    parts += ["", '<a id="contents"></a>', "", "## Contents", ""]
    parts += [f"{i}. [{s.title}](#{s.anchor})" for i, s in enumerate(sections, start=1)]
    return parts


def render_markdown(title: str, intro: str, sections: Sequence[Section], findings: Sequence[Finding] = ()) -> str:
    """The Markdown twin, in the page's order; figures are linked as ``figures/NAME.png`` beside it."""
    parts = [f"# {title}", "", intro] + _md_head(findings, sections)
    for section in sections:
        parts += ["", f'<a id="{section.anchor}"></a>', "", f"## {section.title}"]
        if section.intro:
            parts += ["", section.intro]
        for entry in section.figures:
            if entry.skipped:
                parts += ["", f"*Skipped: {entry.title} ({entry.skipped}).*"]
            else:
                png, svg = entry.files
                parts += ["", f"![{entry.title}](figures/{png.name})", "",
                          f"**{entry.title}.** {entry.about} ([SVG](figures/{svg.name}))"]
        for table_title, frame in section.tables:
            parts += ["", markdown_table(table_title, frame)]
    return "\n".join(parts) + "\n"
