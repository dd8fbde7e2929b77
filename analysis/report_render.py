"""Render a report as one self-contained HTML page (figures embedded as base64 PNG) and
a Markdown twin (figures linked beside it). Plain data in, text out: no lake access."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import pandas as pd

__all__ = ["FigureEntry", "Section", "render_html", "render_markdown"]


@dataclass(frozen=True)
class FigureEntry:
    """One figure of the report: written (``files``: PNG then SVG) or ``skipped`` (a line
    naming the command that produces its rows)."""

    name: str
    title: str
    about: str = ""
    files: Tuple[Path, ...] = ()
    skipped: Optional[str] = None


@dataclass
class Section:
    """A heading, its prose, its figures and its tables (title, frame)."""

    title: str
    intro: str = ""
    figures: List[FigureEntry] = field(default_factory=list)
    tables: List[Tuple[str, pd.DataFrame]] = field(default_factory=list)


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
        return f'<p class="skipped" id="{entry.name}">Skipped: <b>{html.escape(entry.title)}</b> ({html.escape(entry.skipped)}).</p>'
    png, svg = entry.files
    data = base64.b64encode(png.read_bytes()).decode()
    return (f'<figure id="{entry.name}"><img src="data:image/png;base64,{data}" alt="{html.escape(entry.title)}">'
            f"<figcaption><b>{html.escape(entry.title)}.</b> {html.escape(entry.about)} "
            f'<a href="figures/{svg.name}">SVG</a></figcaption></figure>')


def render_html(title: str, intro: str, sections: Sequence[Section]) -> str:
    """The whole page; images are data URIs, so the file stands alone."""
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>"]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
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


def render_markdown(title: str, intro: str, sections: Sequence[Section]) -> str:
    """The Markdown twin; figures are linked as ``figures/NAME.png`` beside it."""
    parts = [f"# {title}", "", intro]
    for section in sections:
        parts += ["", f"## {section.title}"]
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
