"""Render a report as one self-contained HTML page (figures embedded as base64 PNG) and
a Markdown twin (figures linked beside it). Plain data in, text out: no lake access.

A page opens with its findings (the few numbers that answer each topic's question, each
linked to its section), then a table of contents, then the sections in the order given."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import FrozenSet, List, Optional, Sequence, Tuple

import pandas as pd

__all__ = ["FigureEntry", "Section", "Finding", "Topic", "anchor_of", "render_html", "render_markdown"]


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


_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 2em; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: .92em; color: #333; } figcaption a { font-size: .85em; }
table { border-collapse: collapse; font-size: .85em; margin: .6em 0 1.2em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th:first-child, td:first-child { text-align: left; } caption { text-align: left; font-weight: 600; padding: .3em 0; }
.skipped { color: #8a5a00; } code { background: #f4f4f4; padding: 0 .25em; }
.finding { margin: .9em 0 .2em; } .finding + ul { margin-top: .1em; } ol.toc { columns: 2; }
"""


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:.3e}"
    return "" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def _html_table(title: str, frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
                   for row in frame.itertuples(index=False))
    return f"<table><caption>{html.escape(title)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _html_figure(entry: FigureEntry) -> str:
    if entry.skipped:
        return (f'<p class="skipped" id="{html.escape(entry.name)}">Skipped: <b>{html.escape(entry.title)}</b> '
                f"({html.escape(entry.skipped)}).</p>")
    png, svg = entry.files
    data = base64.b64encode(png.read_bytes()).decode()
    return (f'<figure id="{html.escape(entry.name)}">'
            f'<img src="data:image/png;base64,{data}" alt="{html.escape(entry.title)}">'
            f"<figcaption><b>{html.escape(entry.title)}.</b> {html.escape(entry.about)} "
            f'<a href="figures/{svg.name}">SVG</a></figcaption></figure>')


def _html_head(findings: Sequence[Finding], sections: Sequence[Section]) -> List[str]:
    """The findings, then the table of contents."""
    parts = ['<h2 id="findings">Findings</h2>']
    if not findings:
        parts.append("<p>The lake holds no rows to find anything in yet.</p>")
    for finding in findings:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in finding.lines)
        parts.append(f'<p class="finding"><a href="#{finding.anchor}"><b>{html.escape(finding.title)}</b></a></p>'
                     f"<ul>{items}</ul>")
    toc = "".join(f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections)
    parts.append(f'<h2 id="contents">Contents</h2><ol class="toc">{toc}</ol>')
    return parts


def render_html(title: str, intro: str, sections: Sequence[Section], findings: Sequence[Finding] = ()) -> str:
    """The whole page: the findings, the contents, then ``sections``; images are data URIs,
    so the file stands alone."""
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>"]
    parts += _html_head(findings, sections)
    for section in sections:
        parts.append(f'<h2 id="{section.anchor}">{html.escape(section.title)}</h2>')
        if section.intro:
            parts.append(f"<p>{html.escape(section.intro)}</p>")
        parts.extend(_html_figure(f) for f in section.figures)
        parts.extend(_html_table(t, frame) for t, frame in section.tables)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _md_table(title: str, frame: pd.DataFrame) -> str:
    def row(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    lines = [f"**{title}**", "", row(frame.columns), row(["---"] * len(frame.columns))]
    lines += [row(_cell(v) for v in r) for r in frame.itertuples(index=False)]
    return "\n".join(lines)


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
            parts += ["", _md_table(table_title, frame)]
    return "\n".join(parts) + "\n"
