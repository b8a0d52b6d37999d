"""The storage layer sits below kb/ and api/: nothing in kb/ imports api/ (issue 18)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_kb_never_imports_api_not_even_lazily() -> None:
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n == "api" or n.startswith("api."))
                 for p in (ROOT / "kb").rglob("*.py")}
    assert {p: n for p, n in offenders.items() if n} == {}


def test_api_settings_are_the_storage_settings() -> None:
    from dsdoctor.api import settings as api_settings
    from dsdoctor.kb.storage import settings

    assert api_settings.home is settings.home and "DSDOCTOR_DATABASE_URL" in settings.ENVIRONMENT
