"""The README is the front door: short, and every link in it leads somewhere (mkdocs checks docs/ itself)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    # Python-Markdown's toc slugs: lower case, punctuation dropped, spaces to hyphens.
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", page.read_text(), re.MULTILINE)
    return {re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower()) for h in headings}


def test_readme_fits_on_two_screens() -> None:
    assert len(README.read_text().splitlines()) <= 160


@pytest.mark.parametrize("target", sorted(set(LINK.findall(README.read_text()))))
def test_readme_links_lead_somewhere(target: str) -> None:
    if target.startswith(("http://", "https://")):
        return
    path, _, anchor = target.partition("#")
    page = ROOT / path
    assert page.exists(), f"README links to {path}, which does not exist"
    if anchor:
        assert anchor in _anchors(page), f"README links to {target}: no such heading in {path}"


def test_every_docs_page_is_in_the_site_navigation() -> None:
    def pages(nav: object) -> set[str]:
        if isinstance(nav, str):
            return {nav}
        if isinstance(nav, list):
            return set().union(*(pages(item) for item in nav))
        if isinstance(nav, dict):
            return set().union(*(pages(value) for value in nav.values()))
        return set()

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    on_disk = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages(config["nav"]) == on_disk
