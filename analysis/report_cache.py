"""Figures of the report drawn only when what they show changed.

Each figure is keyed by a digest of the lake rows it reads (``digest_sql``: DuckDB hashes
the rows, no row is loaded) and of the code that draws and describes it (``code_version``).
``figures.json`` in the report folder records, per figure, its key, its files, its caption
and when it was drawn; a figure whose key is unchanged and whose files are all there is
reused as it is, and only the others are drawn (``FigureCache.make``).

The manifest also records the key of the whole page (the lake's committed files and sweep
manifests, the code and the options) with the page's outline: while that key holds and the
page's files are there, the page itself is kept and nothing is read or drawn
(``FigureCache.kept_page``).

    cache = FigureCache(Path("report"), version=code_version())
    entry = cache.make("pareto", "Layout search: Pareto front", key, draw, about)   # draw() only if needed
    cache.close(page)                    # writes figures.json, removes figure files no entry names
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from analysis import figures
from analysis.figures.common import MissingRows
from analysis.report_files import check_files, make_folder, refused, write_text
from analysis.report_render import FigureEntry

__all__ = ["FigureCache", "MANIFEST_NAME", "FIGURES_FOLDER", "code_version", "digest_sql", "digest_of", "kind_digest"]

#: The manifest of the figures, in the report folder.
MANIFEST_NAME = "figures.json"
#: The folder of the figure files, in the report folder.
FIGURES_FOLDER = "figures"
_FORMAT = 1
_SUFFIXES = (".png", ".svg")


def digest_sql(columns: Optional[Sequence[str]] = None, alias: str = "") -> str:
    """SQL aggregates ``n, digest``: the row count and an order-independent digest of the
    rows (the sum of DuckDB's hash of each row's ``columns``, or of the whole row of the
    table ``alias``). Equal rows give an equal digest in every process."""
    what = ", ".join(f'"{c}"' for c in columns) if columns else alias
    return f"count(*) AS n, coalesce(sum(hash({what})::HUGEINT), 0)::VARCHAR AS digest"


def kind_digest(con, kind: str) -> str:
    """``N:DIGEST`` of every row of the view ``kind`` on an open connection (``digest_sql``);
    ``0:`` where the lake holds no such view."""
    if not con.execute("SELECT 1 FROM duckdb_views() WHERE view_name = ?", [kind]).fetchall():
        return "0:"
    n, digest = con.execute(f'SELECT {digest_sql(alias="t")} FROM "{kind}" t').fetchone()
    return f"{n}:{digest}"


def digest_of(*parts: object) -> str:
    """One short hex digest of ``parts`` (their ``repr``, in order)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:32]


def code_version(modules: Iterable[str] = ()) -> str:
    """A digest of the code that draws the figures: every module of ``analysis.figures``,
    the files ``modules`` (paths of the modules that word the captions) and matplotlib's
    version. A change to any of them redraws every figure."""
    sources = sorted(Path(figures.__file__).parent.glob("*.py")) + [Path(m) for m in modules]
    digest = hashlib.sha256(metadata.version("matplotlib").encode())
    for path in sources:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:32]


class FigureCache:
    """The figures of one report folder (``out_dir``/figures) and their manifest.

    Open it while holding ``folder_lock`` of ``out_dir`` (``analysis.report_files``): two
    writers of one folder at once would each remove the figures the other draws. Every file
    is written whole or not at all, so a reader never sees half a figure. A folder that
    cannot hold the figures or the manifest is refused on opening (``ReportFolderError``)."""

    def __init__(self, out_dir: Path, *, version: str) -> None:
        self.out_dir = Path(out_dir)
        self.directory = self.out_dir / FIGURES_FOLDER
        check_files(self.out_dir, [MANIFEST_NAME])
        make_folder(self.directory)
        check_files(self.directory, [p.name for p in self.directory.iterdir() if p.suffix in _SUFFIXES])
        self.version = version
        manifest = self._read()
        self._before: Dict[str, dict] = manifest.get("figures") if isinstance(manifest.get("figures"), dict) else {}
        self._page_before: dict = manifest.get("page") if isinstance(manifest.get("page"), dict) else {}
        self._now: Dict[str, dict] = {}

    def _read(self) -> dict:
        try:
            manifest = json.loads((self.out_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return manifest if isinstance(manifest, dict) and manifest.get("format") == _FORMAT else {}

    def make(self, name: str, title: str, key: str, draw: Callable[[], object],
             about: Callable[[], str]) -> FigureEntry:
        """The figure ``name``: reused when its recorded key equals ``key`` (with the code
        version) and its files exist, else drawn (``draw()``) and saved, with ``about()`` as its
        caption. A draw that finds no rows (``MissingRows``) is a skipped entry."""
        key = digest_of(self.version, name, key)
        old = self._before.get(name)
        if old and old.get("key") == key and (old.get("skipped") or self._files_exist(name)):
            self._now[name] = dict(old, title=title)
            return self._entry(name, self._now[name], drawn=False)
        try:
            fig = draw()
        except MissingRows as exc:
            self._now[name] = {"key": key, "title": title, "skipped": str(exc)}
            return self._entry(name, self._now[name], drawn=True)
        self._save(fig, name)
        drawn_at = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        self._now[name] = {"key": key, "title": title, "about": about(), "drawn_at": drawn_at}
        return self._entry(name, self._now[name], drawn=True)

    def skip(self, name: str, title: str, source: str, what: str) -> FigureEntry:
        """A figure with no rows at all: skipped, naming the command that produces them."""
        self._now[name] = {"key": "", "title": title, "skipped": str(MissingRows(source, what))}
        return self._entry(name, self._now[name], drawn=False)

    def _paths(self, name: str) -> List[Path]:
        return [self.directory / f"{name}{suffix}" for suffix in _SUFFIXES]

    def _files_exist(self, name: str) -> bool:
        return all(p.is_file() for p in self._paths(name))

    def _entry(self, name: str, record: dict, *, drawn: bool) -> FigureEntry:
        title = record.get("title", name)
        if record.get("skipped"):
            return FigureEntry(name, title, skipped=record["skipped"], drawn=drawn)
        return FigureEntry(name, title, record.get("about", ""), tuple(self._paths(name)), drawn=drawn,
                           drawn_at=record.get("drawn_at", ""))

    def kept_page(self, key: str, files: Iterable[Path]) -> Optional[dict]:
        """The former page's outline (``sections``: title, anchor and figure entries;
        ``findings``: title, anchor, lines) when it was written under ``key``, ``files``
        exist and so does every figure it shows; else None. The manifest stays as it is."""
        page = self._page_before
        if not page or page.get("key") != key or not all(Path(f).is_file() for f in files):
            return None
        sections = []
        for section in page.get("sections", []):
            names = section.get("figures", [])
            if any(n not in self._before for n in names):
                return None
            entries = [self._entry(n, self._before[n], drawn=False) for n in names]
            if any(e.files and not self._files_exist(e.name) for e in entries):
                return None
            sections.append({"title": section["title"], "anchor": section["anchor"], "figures": entries})
        return {"sections": sections, "findings": page.get("findings", [])}

    def _save(self, fig, name: str) -> None:
        figures.save(fig, self.directory / name)  # the files of _paths(name)

    def close(self, page: Optional[dict] = None) -> None:
        """Write the manifest of the figures made since opening (and of the ``page``: its
        key and outline) and remove figure files that none of them names (figures of a
        former report that this one does not draw)."""
        keep = {p.name for name, record in self._now.items() if not record.get("skipped") for p in self._paths(name)}
        for path in self.directory.iterdir():
            if path.suffix in _SUFFIXES and path.name not in keep:
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    raise refused(path, exc) from None
        text = json.dumps({"format": _FORMAT, "page": page or {}, "figures": self._now}, indent=1, sort_keys=True)
        write_text(self.out_dir / MANIFEST_NAME, text)
