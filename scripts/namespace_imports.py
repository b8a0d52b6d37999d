"""Rewrite the tree's imports of the top-level ``api``, ``kb`` and ``rules`` folders to the one
installed namespace, ``dsdoctor.api``, ``dsdoctor.kb`` and ``dsdoctor.rules``.

Idempotent: a second run changes nothing (``--check`` exits 1 when something would change). It
touches only:

* import statements in Python files (``from kb.x import y``, ``import kb.x as y``, ``import kb.x``
  whose bound name is used only as ``kb.<module>`` in its scope, or not at all);
* in Python string literals: import lines of code run by ``python -c`` or a subprocess, quoted
  dotted names of modules that exist in the tree (``"api.cli"`` after ``-m``, ``mock.patch``
  targets, ``"api.gworker.Worker"``) and ``-m api.cli``;
* in Markdown, the same forms inside fenced code blocks only (prose is left alone);
* in Makefile, shell, TOML, YAML and nginx files, ``-m api.cli`` and entry points
  (``"api.cli:main"``), and ruff's isort ``known-first-party`` list in pyproject.toml.

A dotted name is rewritten only when its first two parts name a real module or package of the
tree (``kb/loader.py``, ``api/web/__init__.py``), so ``"rules.yaml"`` or a blueprint named
``"kb"`` stay as they are. The Python files it changed are then import-sorted with ruff (the
first-party section becomes ``bench``, ``dsdoctor``, ``tests``). What it cannot rewrite safely
(``import kb.x`` whose name ``kb`` is also used otherwise) is printed and the exit status is 2.

Usage: python scripts/namespace_imports.py [--check] [--no-ruff] [ROOT]
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import shutil
import subprocess
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

NAMESPACE = "dsdoctor"
ROOTS = ("api", "kb", "rules")
_ROOT = "|".join(ROOTS)
# folders never read: data, caches, builds, and the benchmark corpus (unscored cases live there)
SKIP_DIRS = {".git", ".venv", "venv", "var", "site", "build", "dist", "node_modules", "__pycache__",
             "seed_cases", "output", "out", "corpus", "data", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
TEXT_NAMES = {"Makefile", "Dockerfile"}
TEXT_SUFFIXES = {".sh", ".toml", ".cfg", ".ini", ".yml", ".yaml", ".conf", ".service"}

# `from kb.x import` / `import kb.x as y` inside code text (strings, Markdown code blocks)
_FROM_RE = re.compile(rf"(?<![\w.])(from[ \t]+)({_ROOT})((?:\.\w+)*[ \t]+import\b)")
_IMPORT_AS_RE = re.compile(rf"(?<![\w.])(import[ \t]+)({_ROOT})(\.[\w.]+[ \t]+as[ \t]+\w+)")
_BARE_IMPORT_RE = re.compile(rf"(?<![\w.])import[ \t]+({_ROOT})\.[\w.]+(?![\w.]|[ \t]+as\b)")
_MODULE_FLAG_RE = re.compile(rf"(?<![\w-])(-m[ \t]+)({_ROOT})((?:\.\w+)+)")
_QUOTED_RE = re.compile(rf"(?<=['\"])({_ROOT})((?:\.\w+)+(?::\w+)?)(?=['\"])")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")
_FIRST_PARTY_RE = re.compile(r"^(\s*known-first-party\s*=\s*)\[([^\]]*)\]", re.M)


@dataclass
class Result:
    """What a run changed and what it left for a hand edit."""

    changed: dict[Path, list[str]] = field(default_factory=dict)
    manual: list[str] = field(default_factory=list)


class Tree:
    """The modules of one checkout: which dotted names are real."""

    def __init__(self, root: Path):
        self.root = root

    def is_module(self, dotted: str) -> bool:
        """True when ``dotted`` starts with a root folder and a module or package inside it."""
        parts = dotted.split(":")[0].split(".")
        if len(parts) < 2 or parts[0] not in ROOTS or not all(p.isidentifier() for p in parts):
            return False
        base = self.root / parts[0] / parts[1]
        return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def rewrite_code_text(text: str, tree: Tree, where: str, manual: list[str]) -> str:
    """Import lines, ``-m`` flags and quoted module names inside code that is text (not parsed)."""
    text = _FROM_RE.sub(lambda m: f"{m[1]}{NAMESPACE}.{m[2]}{m[3]}", text)
    text = _IMPORT_AS_RE.sub(lambda m: f"{m[1]}{NAMESPACE}.{m[2]}{m[3]}", text)
    text = _MODULE_FLAG_RE.sub(
        lambda m: f"{m[1]}{NAMESPACE}.{m[2]}{m[3]}" if tree.is_module(m[2] + m[3]) else m[0], text)
    text = _QUOTED_RE.sub(lambda m: f"{NAMESPACE}.{m[1]}{m[2]}" if tree.is_module(m[1] + m[2]) else m[0], text)
    for m in _BARE_IMPORT_RE.finditer(text):
        manual.append(f"{where}: `{m[0]}` in a string: write `from {NAMESPACE}.… import …` by hand")
    return text


# ---------------------------------------------------------------- Python


def _line_offsets(source: str) -> list[int]:
    offsets, pos = [0], 0
    for line in source.splitlines(keepends=True):
        pos += len(line)
        offsets.append(pos)
    return offsets


class _Edits:
    """Text edits by (line, utf-8 column) positions, applied back to front."""

    def __init__(self, source: str):
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.offsets = _line_offsets(source)
        self.items: list[tuple[int, int, str]] = []

    def index(self, lineno: int, col_bytes: int) -> int:
        line = self.lines[lineno - 1]
        return self.offsets[lineno - 1] + len(line.encode("utf-8")[:col_bytes].decode("utf-8", "replace"))

    def replace(self, start: int, end: int, text: str) -> None:
        self.items.append((start, end, text))

    def apply(self) -> str:
        out = self.source
        for start, end, text in sorted(set(self.items), reverse=True):
            out = out[:start] + text + out[end:]
        return out


def _scope_of(tree: ast.Module, node: ast.AST) -> ast.AST:
    """The innermost function (or the module) that contains ``node``."""
    best: ast.AST = tree
    for candidate in ast.walk(tree):
        if isinstance(candidate, ast.FunctionDef | ast.AsyncFunctionDef) and any(n is node for n in ast.walk(candidate)):
            best = candidate  # ast.walk is breadth first: a later hit is nested deeper
    return best


def _bare_import(tree: ast.Module, node: ast.Import, alias: ast.alias, files: Tree, edits: _Edits,
                 where: str, manual: list[str]) -> None:
    """``import kb.x``: the bound name ``kb`` must become ``dsdoctor.kb`` wherever it is used."""
    root = alias.name.split(".")[0]
    scope = _scope_of(tree, node)
    parents = {id(child): parent for parent in ast.walk(scope) for child in ast.iter_child_nodes(parent)}
    uses = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == root]
    bad = [n for n in uses if not (isinstance(n.ctx, ast.Load) and isinstance(parents.get(id(n)), ast.Attribute)
                                   and files.is_module(f"{root}.{parents[id(n)].attr}"))]
    if bad:
        manual.append(f"{where}:{node.lineno}: `import {alias.name}` but `{root}` is also used otherwise "
                      f"(line {bad[0].lineno}): rewrite by hand")
        return
    start = edits.index(alias.lineno, alias.col_offset)
    edits.replace(start, start, f"{NAMESPACE}.")
    for n in uses:
        pos = edits.index(n.lineno, n.col_offset)
        edits.replace(pos, pos, f"{NAMESPACE}.")


def rewrite_python(source: str, files: Tree, where: str, manual: list[str]) -> str:
    """Import statements (from the syntax tree) and string literals (from the tokens)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        manual.append(f"{where}:{exc.lineno}: not valid Python ({exc.msg}); left as it is")
        return source
    edits = _Edits(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in ROOTS:
            start = edits.index(node.lineno, node.col_offset)
            m = re.compile(rf"from(\s+)({_ROOT})\b").match(source, start)
            if m is None:
                manual.append(f"{where}:{node.lineno}: unusual `from {node.module}` statement: rewrite by hand")
                continue
            edits.replace(m.start(2), m.start(2), f"{NAMESPACE}.")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root not in ROOTS:
                    continue
                if alias.asname or "." not in alias.name:
                    if "." not in alias.name and not alias.asname:
                        manual.append(f"{where}:{node.lineno}: `import {root}`: write `from {NAMESPACE} import "
                                      f"{root}` by hand")
                        continue
                    start = edits.index(alias.lineno, alias.col_offset)
                    edits.replace(start, start, f"{NAMESPACE}.")
                else:
                    _bare_import(tree, node, alias, files, edits, where, manual)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.STRING:
            continue
        new = rewrite_code_text(tok.string, files, f"{where}:{tok.start[0]}", manual)
        if new != tok.string:
            start = edits.offsets[tok.start[0] - 1] + tok.start[1]  # tokenize counts characters
            edits.replace(start, start + len(tok.string), new)
    return edits.apply()


# ---------------------------------------------------------------- other files


def rewrite_markdown(text: str, files: Tree, where: str, manual: list[str]) -> str:
    """Only the fenced code blocks: prose that names ``kb.loader`` is about the folder and stays."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        if _FENCE_RE.match(line):
            fenced = not fenced
        elif fenced:
            line = rewrite_code_text(line, files, f"{where}:{n}", manual)
        out.append(line)
    return "".join(out)


def _first_party(m: re.Match[str]) -> str:
    names = [n.strip().strip("'\"") for n in m[2].split(",") if n.strip()]
    if not any(n in ROOTS for n in names):
        return m[0]
    kept: list[str] = []
    for n in names:
        n = NAMESPACE if n in ROOTS else n
        if n not in kept:
            kept.append(n)
    return m[1] + "[" + ", ".join(f'"{n}"' for n in kept) + "]"


def rewrite_text(text: str, files: Tree, where: str, manual: list[str], path: Path) -> str:
    """``-m api.cli``, ``"api.cli:main"`` and (pyproject.toml) ruff's known-first-party."""
    text = _MODULE_FLAG_RE.sub(
        lambda m: f"{m[1]}{NAMESPACE}.{m[2]}{m[3]}" if files.is_module(m[2] + m[3]) else m[0], text)
    text = _QUOTED_RE.sub(lambda m: f"{NAMESPACE}.{m[1]}{m[2]}" if files.is_module(m[1] + m[2]) else m[0], text)
    if path.name == "pyproject.toml":
        text = _FIRST_PARTY_RE.sub(_first_party, text)
    return text


# ---------------------------------------------------------------- the tree


def _is_script(path: Path) -> bool:
    """A file without a suffix that starts with ``#!`` (the CI scripts)."""
    if path.suffix:
        return False
    try:
        with path.open("rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def candidates(root: Path, skip: set[Path]) -> list[Path]:
    """The files to look at, in a stable order."""
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts[:-1]):
            continue
        if path.is_file() and path.resolve() not in skip and (
                path.suffix in {".py", ".md"} | TEXT_SUFFIXES or path.name in TEXT_NAMES or _is_script(path)):
            found.append(path)
    return found


def _diff_lines(old: str, new: str) -> list[str]:
    a, b = old.splitlines(), new.splitlines()
    if len(a) != len(b):  # ruff may rewrap; show the count only
        return [f"{len(a)} -> {len(b)} lines"]
    return [f"{n}: {x.strip()}  ->  {y.strip()}" for n, (x, y) in enumerate(zip(a, b, strict=True), 1) if x != y]


def _sort_imports(paths: list[Path], root: Path) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        print("ruff not found: imports not re-sorted (run `ruff check --select I --fix`)", file=sys.stderr)
        return
    subprocess.run([ruff, "check", "--quiet", "--select", "I001", "--fix", "--exit-zero",
                    *map(str, paths)], cwd=root, check=False)


def run(root: Path, *, write: bool = True, sort: bool = True) -> Result:
    """Rewrite (or with ``write=False`` only find) what needs the namespace under ``root``."""
    files = Tree(root)
    result = Result()
    this = Path(__file__).resolve()
    changed_py = []
    for path in candidates(root, {this}):
        rel = path.relative_to(root)
        try:
            old = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if path.suffix == ".py":
            new = rewrite_python(old, files, str(rel), result.manual)
        elif path.suffix == ".md":
            new = rewrite_markdown(old, files, str(rel), result.manual)
        else:
            new = rewrite_text(old, files, str(rel), result.manual, path)
        if new == old:
            continue
        result.changed[rel] = _diff_lines(old, new)
        if write:
            path.write_text(new, encoding="utf-8")
            if path.suffix == ".py":
                changed_py.append(path)
    if write and sort and changed_py:
        _sort_imports(changed_py, root)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if something would change")
    parser.add_argument("--no-ruff", action="store_true", help="do not re-sort the imports of changed files")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    result = run(root, write=not args.check, sort=not args.no_ruff)
    verb = "would change" if args.check else "changed"
    for rel, lines in result.changed.items():
        print(f"{verb} {rel}")
        for line in lines:
            print(f"    {line}")
    for item in result.manual:
        print(f"hand edit: {item}", file=sys.stderr)
    print(f"{len(result.changed)} file(s) {verb}, {len(result.manual)} left for a hand edit", file=sys.stderr)
    if result.manual:
        return 2
    return 1 if args.check and result.changed else 0


if __name__ == "__main__":
    sys.exit(main())
