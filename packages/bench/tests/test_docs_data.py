"""docs/data holds the measurements the documentation cites, and only those: linked, present, small, plainly named.

The bench's reports (``tritred bench --json``, ``--report ... --plot``) are what docs/performance.md links; this
keeps the links and the files in step, and the pages free of work-period labels and citations of scripts.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"] + sorted((ROOT / "packages").glob("*/README.md"))
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: Labels of work periods in prose: an ordinal, or a number, beside the word for a work period.
PERIODS = re.compile(r"\b((first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
                     r"\w+teenth|twenty\S*|thirty\S*|forty\S*) session|sessions? \d+)\b", re.IGNORECASE)
#: ... and in file names, also numbered periods and experiments ("s31", "before", "probe").
FILE_LABELS = re.compile(r"\b(s\d{1,3}|before|after|probe|exp|ab|session)\b", re.IGNORECASE)

pytestmark = pytest.mark.skipif(not (DOCS / "data").is_dir(), reason="not run from a checkout with docs/")


def _links() -> dict[Path, list[str]]:
    out: dict[Path, list[str]] = {}
    for page in PAGES:
        if page.is_file():
            text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # (code blocks hold no links)
            out[page] = [unquote(t.split("#")[0]) for t in LINK.findall(text)
                         if not re.match(r"[a-z]+://", t) and not t.startswith("#")]
    return out


def test_every_local_link_resolves() -> None:
    missing = [f"{page.relative_to(ROOT)} -> {target}" for page, targets in _links().items() for target in targets
               if target and not (page.parent / target).exists()]
    assert not missing, missing


def test_docs_data_is_cited_small_and_plainly_named() -> None:
    data = DOCS / "data"
    files = sorted(p for p in data.rglob("*") if p.is_file())
    linked = {(page.parent / t).resolve() for page, targets in _links().items() for t in targets if t}
    assert not [p.name for p in files if p.resolve() not in linked], "files in docs/data that no page links"
    assert sum(p.stat().st_size for p in files) < 2 * 1024 * 1024
    assert not [p.name for p in files if FILE_LABELS.search(p.stem.replace("-", " ").replace("_", " "))]


def test_pages_state_the_product_not_its_history() -> None:
    for page in PAGES:
        text = page.read_text()
        assert "tools/" not in text, f"{page.relative_to(ROOT)} cites a script in tools/"
        labels = [m.group(0) for m in PERIODS.finditer(text)]
        assert not labels, f"{page.relative_to(ROOT)}: {labels}"
