"""The root-cause catalog: the stable cause IDs that diagnoses are scored against.

The file (``kb/catalog/root_causes.yaml``, a vendored copy of the shared catalog) maps each
domain to ``{cause id: {en, zh}}``. Every catalog ID must exist as a cause in the knowledge
base; ``dsdoctor kb lint`` checks that.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dsdoctor.kb.errors import KnowledgeError, Problem
from dsdoctor.kb.yamlload import LineDict, display_path, load_file

CATALOG_PATH = Path(__file__).resolve().parent / "catalog" / "root_causes.yaml"


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    domain: str
    en: str
    zh: str
    file: str
    line: int


def load_catalog(path: Path | None = None) -> dict[str, CatalogEntry]:
    """Read a catalog file (default: the vendored copy); raise KnowledgeError listing every problem."""
    path = path or CATALOG_PATH
    data, problems = load_file(path)
    file = display_path(path)
    entries: dict[str, CatalogEntry] = {}
    if data is not None and not isinstance(data, LineDict):
        problems.append(Problem(file, 1, "the catalog must map each domain to {cause id: {en, zh}}"))
    for domain, causes in (data or {}).items() if isinstance(data, LineDict) else ():
        if not isinstance(causes, LineDict):
            problems.append(Problem(file, data.key_lines[domain], f"domain {domain!r} must map cause IDs to {{en, zh}}"))
            continue
        for cause_id, texts in causes.items():
            line = causes.key_lines[cause_id]
            if not isinstance(cause_id, str) or not cause_id.startswith(f"{domain}."):
                problems.append(Problem(file, line, f"cause ID {cause_id!r} must start with its domain '{domain}.'"))
                continue
            if not isinstance(texts, dict) or not all(isinstance(texts.get(k), str) for k in ("en", "zh")):
                problems.append(Problem(file, line, f"cause {cause_id!r} needs text fields en and zh"))
                continue
            entries[cause_id] = CatalogEntry(cause_id, str(domain), texts["en"], texts["zh"], file, line)
    if problems:
        raise KnowledgeError(problems)
    return entries
