"""The project's documentation as one text: README.md followed by every page of docs/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def docs_text() -> str:
    """README.md and docs/*.md, so a test can check that something is documented somewhere."""
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return "\n".join(p.read_text(encoding="utf-8") for p in paths if p.is_file())


DOCS = docs_text()
