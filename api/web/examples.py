"""Shipped examples for the new-diagnosis form: a seed case's logs, ds_config and description.

The cases are the repository's ``seed_cases/`` (each with an ``expected.yaml`` that the seed-case
tests check); the form offers the few listed in :data:`EXAMPLES`. An installation without the
folder (a wheel) offers none.
"""

from __future__ import annotations

from pathlib import Path

CASES_DIR = Path(__file__).resolve().parents[2] / "seed_cases"
#: the cases the form offers: small logs, three different domains (memory, host RAM, network)
EXAMPLES = (
    "only-rank-3-ooms-on-an-8-gpu-node-while-a-stale-process-holds-its-gpu",
    "zero-3-offload-run-killed-with-return-code-minus-9-by-the-kernel-oom-killer",
    "two-node-job-hangs-at-the-first-broadcast-because-nccl-bound-docker0",
)


def available() -> list[dict[str, str]]:
    """The examples present here: ``{"slug", "title"}`` (the title is the slug in words)."""
    return [{"slug": slug, "title": slug.replace("-", " ")} for slug in EXAMPLES if (CASES_DIR / slug).is_dir()]


def form_of(slug: str) -> dict[str, str] | None:
    """The form fields of one listed example (None: not one of them or not shipped here)."""
    case = CASES_DIR / slug
    if slug not in EXAMPLES or not case.is_dir():
        return None
    logs = [p.read_text(encoding="utf-8") for p in sorted(case.glob("*.log"))]
    form = {"logs_text": "\n".join(text.rstrip("\n") for text in logs) + "\n"}
    for field, name in (("config_text", "ds_config.json"), ("description", "description.txt")):
        if (case / name).is_file():
            form[field] = (case / name).read_text(encoding="utf-8")
    return form
