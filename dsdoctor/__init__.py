"""dsdoctor: diagnose failed DeepSpeed / PyTorch-distributed / NCCL training jobs.

The Python API (docs/python-api.md)::

    from dsdoctor import diagnose

    result = diagnose("examples/evidence.json")
    print(result.top_cause["id"], result.next_experiments[0]["observe"])
    again = result.observe("x.compare_nccl_versions=mismatch")

The layers are subpackages: ``dsdoctor.kb`` (knowledge base, inference, incidents),
``dsdoctor.rules`` (evidence rules) and ``dsdoctor.api`` (REST API, web pages, command line);
only the names below are the stable API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dsdoctor.kb.errors import DsdoctorError
    from dsdoctor.public import Diagnosis, EvidenceError, diagnose, load_evidence, search_incidents

__all__ = ["Diagnosis", "DsdoctorError", "EvidenceError", "__version__", "diagnose", "load_evidence",
           "search_incidents"]

_PUBLIC = {"Diagnosis", "EvidenceError", "diagnose", "load_evidence", "search_incidents"}


def __getattr__(name: str) -> Any:
    # Lazy: every `import dsdoctor.kb...` imports this package first, and a diagnosis from the
    # command line must not pay for the schemas and renderers the Python API uses.
    if name in _PUBLIC:
        from dsdoctor import public

        return getattr(public, name)
    if name == "DsdoctorError":
        from dsdoctor.kb.errors import DsdoctorError

        return DsdoctorError
    if name == "__version__":
        from dsdoctor.api.version import package_version

        return package_version()
    raise AttributeError(f"module 'dsdoctor' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
