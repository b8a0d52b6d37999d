"""The documentation site builds with `mkdocs build --strict`, offline, with generated CLI and REST pages."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import gen_docs  # noqa: E402

from tests.test_foundation import ALL_COMMANDS  # noqa: E402


def test_the_cli_page_has_the_help_of_every_command() -> None:
    page = gen_docs.cli_page()
    for path in ALL_COMMANDS:
        assert f"`dsdoctor {' '.join(path)}`" in page
    assert "Usage: dsdoctor [OPTIONS] COMMAND" in page and "Usage: dsdoctor diagnose [OPTIONS] [LOGS]..." in page


def test_the_rest_page_has_every_operation_with_its_id() -> None:
    spec = gen_docs.openapi()
    page = gen_docs.rest_page(spec)
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            if method in gen_docs.METHODS:
                assert f"### `{method.upper()} {path}`" in page
                assert f"operationId: `{op['operationId']}`" in page
    assert "### Evidence {#schema-evidence}" in page


def test_mkdocs_builds_the_site_strictly_and_offline(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs not installed (pip install -e '.[docs]')")
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("cli.md", "rest.md"))
    assert gen_docs.main([str(docs)]) == 0
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = config.replace("docs_dir: docs", f"docs_dir: {docs}").replace("site_dir: site", f"site_dir: {tmp_path / 'site'}")
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pages = {p.name for p in (tmp_path / "site").glob("*.html")}
    assert {"index.html", "cli.html", "rest.html", "formats.html", "internals.html", "corpus.html"} <= pages
    nav = [re.search(r"(\w[\w-]*)\.md$", line).group(1) for line in config.splitlines() if line.strip().endswith(".md")]
    assert sorted(f"{n}.md" for n in nav) == sorted(p.name for p in docs.glob("*.md")), "a page is not in the nav"
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)="https?://[^"]*\.(js|css)""", html), "the site loads a script or style from the network"
