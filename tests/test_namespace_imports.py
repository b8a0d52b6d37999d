"""scripts/namespace_imports.py: rewrites every import form it knows, twice is a no-op, the repo needs none.

The sample sources spell the old names as ``{K}`` (kb), ``{A}`` (api) and ``{R}`` (rules) so that
the script, run on this repository, never rewrites the samples of its own test.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "namespace_imports.py"
NAMES = {"K": "kb", "A": "api", "R": "rules"}


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n").format(**NAMES)


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--no-ruff", *args, str(root)], capture_output=True,
                          text=True, timeout=60)


def _tree(root: Path) -> None:
    for pkg, modules in {"kb": ["loader", "graph", "yamlload"], "api": ["cli", "gworker", "server"],
                         "rules": ["extract"]}.items():
        (root / pkg).mkdir()
        (root / pkg / "__init__.py").write_text("")
        for module in modules:
            (root / pkg / f"{module}.py").write_text("X = 1\n")
    (root / "kb" / "incidents").mkdir()
    (root / "kb" / "incidents" / "__init__.py").write_text("")
    (root / "kb" / "data").mkdir()


BEFORE = _src('''
    """Uses {K}.loader (prose stays)."""
    import subprocess
    import sys

    import {K}.graph as graph_module
    from {A} import cli
    from {K}.incidents import (
        X,
    )
    from {K}.loader import X as Y
    from . import sibling

    _CODE = ("{K}.loader", "{K}.yamlload")
    NOT_MODULES = ("{R}.yaml", "{K}", "{K}.data", "{A}.nothing", "see {K}.loader")
    CODE = "import sys; from {A}.cli import main; print('{K}.incidents' in sys.modules)"


    def serve():
        subprocess.run([sys.executable, "-m", "{A}.cli", "serve"])
        return "{A}.gworker.Worker", "run with -m {A}.cli"


    def test_patch(monkeypatch):
        import {K}.graph

        monkeypatch.setattr({K}.graph, "X", 2)
        monkeypatch.setattr("{A}.server.X", 3)


    def side_effect():
        import {R}.extract  # noqa: F401
''')

AFTER = _src('''
    """Uses {K}.loader (prose stays)."""
    import subprocess
    import sys

    import dsdoctor.{K}.graph as graph_module
    from dsdoctor.{A} import cli
    from dsdoctor.{K}.incidents import (
        X,
    )
    from dsdoctor.{K}.loader import X as Y
    from . import sibling

    _CODE = ("dsdoctor.{K}.loader", "dsdoctor.{K}.yamlload")
    NOT_MODULES = ("{R}.yaml", "{K}", "{K}.data", "{A}.nothing", "see {K}.loader")
    CODE = "import sys; from dsdoctor.{A}.cli import main; print('dsdoctor.{K}.incidents' in sys.modules)"


    def serve():
        subprocess.run([sys.executable, "-m", "dsdoctor.{A}.cli", "serve"])
        return "dsdoctor.{A}.gworker.Worker", "run with -m dsdoctor.{A}.cli"


    def test_patch(monkeypatch):
        import dsdoctor.{K}.graph

        monkeypatch.setattr(dsdoctor.{K}.graph, "X", 2)
        monkeypatch.setattr("dsdoctor.{A}.server.X", 3)


    def side_effect():
        import dsdoctor.{R}.extract  # noqa: F401
''')

MARKDOWN = _src('''
    Prose names `{K}.loader` and `from {K}.loader import get_kb` and stays.

    ```python
    from {R}.extract import extract
    ```

    ```bash
    python -m {A}.cli diagnose x.log
    ```
''')

PYPROJECT = _src('''
    [project.scripts]
    dsdoctor = "{A}.cli:main"

    [tool.ruff.lint.isort]
    known-first-party = ["{A}", "{K}", "{R}", "bench", "tests"]
''')


def test_rewrites_every_known_form_and_a_second_run_changes_nothing(tmp_path):
    _tree(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(BEFORE)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(MARKDOWN)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "Makefile").write_text(_src("run:\n\tpython -m {A}.cli serve\n"))

    check = _run(tmp_path, "--check")
    assert check.returncode == 1 and "would change tests/test_x.py" in check.stdout
    assert (tmp_path / "tests" / "test_x.py").read_text() == BEFORE  # --check writes nothing

    first = _run(tmp_path)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "tests" / "test_x.py").read_text() == AFTER
    md = (tmp_path / "docs" / "guide.md").read_text()
    assert _src("Prose names `{K}.loader` and `from {K}.loader import get_kb`") in md
    assert _src("from dsdoctor.{R}.extract import extract") in md and _src("python -m dsdoctor.{A}.cli") in md
    toml = (tmp_path / "pyproject.toml").read_text()
    assert _src('dsdoctor = "dsdoctor.{A}.cli:main"') in toml
    assert 'known-first-party = ["dsdoctor", "bench", "tests"]' in toml
    assert _src("python -m dsdoctor.{A}.cli serve") in (tmp_path / "Makefile").read_text()
    assert "changed tests/test_x.py" in first.stdout and "4 file(s) changed" in first.stderr
    compile(AFTER, "after.py", "exec")

    snapshot = {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    second = _run(tmp_path)
    assert second.returncode == 0 and "0 file(s) changed" in second.stderr
    assert {p: p.read_text() for p in tmp_path.rglob("*") if p.is_file()} == snapshot
    assert _run(tmp_path, "--check").returncode == 0


def test_an_import_whose_name_is_used_otherwise_is_left_for_a_hand_edit(tmp_path):
    _tree(tmp_path)
    source = _src('''
        import {K}.graph

        {K} = {K}.graph.X
    ''')
    (tmp_path / "mod.py").write_text(source)
    done = _run(tmp_path)
    assert done.returncode == 2
    assert _src("mod.py:1: `import {K}.graph` but `{K}` is also used otherwise (line 3)") in done.stderr
    assert (tmp_path / "mod.py").read_text() == source


def test_skips_data_caches_and_the_benchmark_corpus(tmp_path):
    _tree(tmp_path)
    for folder in ("bench/corpus/batch1", "seed_cases/case", ".venv/lib", "kb/data"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "x.py").write_text(_src("from {K}.loader import X\n"))
    assert _run(tmp_path, "--check").returncode == 0


def test_the_checked_in_tree_needs_no_rewrite():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 file(s) would change, 0 left for a hand edit" in done.stderr
