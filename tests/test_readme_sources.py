"""The README stands alone: every repository file it names exists, and nothing it or a
preset cites lies outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: Files the README names that a run writes (in a lake, a report), not the repository.
WRITTEN = {"_lake.json", "figures.json", "report.md"}


def test_every_file_the_readme_names_is_in_the_repository():
    named = set(re.findall(r"`([A-Za-z0-9_./-]+\.(?:py|yaml|md|csv|json))`", README)) - WRITTEN
    assert len(named) >= 20
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []


def test_no_citation_points_outside_the_repository():
    texts = {"README.md": README}
    for folder in ("conf", "docs", "tests/fixtures"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".yaml", ".md"):
                texts[str(path.relative_to(ROOT))] = path.read_bytes().decode("utf-8", errors="replace")
    outside = re.compile(r"(?<![\w.])(?:\.\./|shared/)")
    assert sorted(name for name, text in texts.items() if outside.search(text)) == []
    assert (ROOT / "docs" / "method.md").is_file()
    assert {p.name for p in (ROOT / "conf" / "data").glob("*.csv")} >= {
        "accelerators.csv", "transformer_models.csv", "published_runs.csv", "layer_times.csv",
        "collective_ladders.csv", "gemm_efficiency.csv"}
