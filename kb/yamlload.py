"""A strict YAML loader for knowledge files: duplicate keys are errors, every node keeps its line.

Mappings load as :class:`LineDict` and sequences as :class:`LineList`: plain ``dict``/``list``
subclasses that also carry the 1-based line of the node (``.line``) and of each key or item
(``.key_lines`` / ``.item_lines``). :func:`line_of` turns a path into the line to report, so
every later check (schema, references, lint) can say ``file:line: message``.

Parse errors and duplicate keys come back as :class:`~kb.errors.Problem` objects, never as
tracebacks. The C parser (libyaml) is used when PyYAML was built with it; construction is
PyYAML's safe constructor in both cases, so only plain data types are ever built.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsdoctor.kb.errors import Problem

if TYPE_CHECKING:
    import yaml


class LineDict(dict):
    """A dict that remembers the line of the mapping and of each key (1-based)."""

    __slots__ = ("key_lines", "line")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line = 0
        self.key_lines: dict[Any, int] = {}


class LineList(list):
    """A list that remembers the line of the sequence and of each item (1-based)."""

    __slots__ = ("item_lines", "line")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.line = 0
        self.item_lines: list[int] = []


@cache
def _strict_loader() -> type:
    """The safe loader that records line numbers and collects duplicate keys as problems. Built on first
    use: PyYAML is imported only when a file is parsed, not by a process that loads knowledge from a
    snapshot (kb/snapshot.py) and only needs :class:`LineDict` and :func:`line_of`."""
    import yaml

    base: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc, valid-type]
        def __init__(self, stream: str, file: str = "<string>") -> None:
            super().__init__(stream)
            self.file = file
            self.problems: list[Problem] = []

    StrictLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
    StrictLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)
    return StrictLoader


def _construct_mapping(loader: Any, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    result = LineDict()
    result.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, Hashable):
            loader.problems.append(
                Problem(loader.file, line, "a mapping key must be a plain value (text or number), not a list or mapping")
            )
            continue
        if key in result:
            first = result.key_lines[key]
            loader.problems.append(
                Problem(loader.file, line, f"duplicate key {key!r} (first at line {first}): keep only one of them")
            )
            continue
        result[key] = loader.construct_object(value_node, deep=True)
        result.key_lines[key] = line
    return result


def _construct_sequence(loader: Any, node: yaml.SequenceNode) -> LineList:
    result = LineList(loader.construct_object(child, deep=True) for child in node.value)
    result.line = node.start_mark.line + 1
    result.item_lines = [child.start_mark.line + 1 for child in node.value]
    return result


def display_path(path: Path | str) -> str:
    """Path as shown in problems: relative to the working directory when it lies below it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(p)


def _yaml_error_problem(file: str, exc: yaml.YAMLError, text: str) -> Problem:
    import yaml

    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = mark.line + 1 if mark is not None else 1
    if isinstance(exc, yaml.MarkedYAMLError):
        message = exc.problem or exc.context or type(exc).__name__
        if exc.problem and exc.context:
            where = exc.context_mark.line + 1 if exc.context_mark is not None else line
            message = f"{exc.problem} ({exc.context}, line {where})"
    else:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    lines = text.splitlines()
    source_line = lines[line - 1] if 0 < line <= len(lines) else ""
    hint = ""
    if "\t" in source_line[: len(source_line) - len(source_line.lstrip())] or "'\\t'" in message:
        hint = ": indent with spaces, not tabs"
    elif "mapping values are not allowed" in message:
        hint = ": quote values that contain ': ' or check the indentation"
    return Problem(file, line, f"YAML syntax error: {message}{hint}")


def load_text(text: str, file: str = "<string>") -> tuple[Any, list[Problem]]:
    """Parse one YAML document; return ``(data, problems)``. ``data`` is ``None`` on a syntax error."""
    import yaml

    loader = _strict_loader()(text, file)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        return None, [*loader.problems, _yaml_error_problem(file, exc, text)]
    finally:
        loader.dispose()
    return data, loader.problems


def load_file(path: Path) -> tuple[Any, list[Problem]]:
    """Read and parse a YAML file; unreadable files and bad encodings become problems too."""
    file = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        return None, [Problem(file, 1, f"the file is not UTF-8 text ({exc.reason} at byte {exc.start}): save it as UTF-8")]
    except OSError as exc:
        return None, [Problem(file, 0, f"cannot read the file: {exc.strerror or exc}")]
    return load_text(text, file)


def line_of(node: Any, path: Sequence[Any]) -> int:
    """The line of the deepest part of ``path`` (keys and list indices) that exists under ``node``.

    A key's own line is used for the last step, so a problem about ``prior.basis`` points at
    the ``basis:`` line, or at ``prior:`` when ``basis`` is missing.
    """
    line = getattr(node, "line", 0)
    current = node
    for step in path:
        if isinstance(current, LineDict) and step in current:
            line = current.key_lines.get(step, line)
            current = current[step]
        elif isinstance(current, LineList) and isinstance(step, int) and 0 <= step < len(current):
            line = current.item_lines[step]
            current = current[step]
        else:
            break
        if isinstance(current, (LineDict, LineList)) and not line:
            line = current.line
    return line
