"""Property-based fuzzing of every operation in /openapi.json with schemathesis (in-process, bounded).

Asserts: no 5xx, every status code and content type documented, every response body valid
against its documented schema (errors against the problem+json schema), headers as documented.
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.kbfactory import nan_kb
from tests.test_api_support import fake_diagnose

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          response_headers_conformance]


def _build_app():
    """The app under test, built at import: schemathesis needs the schema when tests are collected."""
    import atexit
    import shutil
    import tempfile

    from api.app import create_app

    home = tempfile.mkdtemp(prefix="dsdoctor-fuzz-")
    atexit.register(shutil.rmtree, home, True)
    return create_app({"DSDOCTOR_HOME": home, "DSDOCTOR_KB": nan_kb(), "DSDOCTOR_DIAGNOSE": fake_diagnose,
                       "DSDOCTOR_SEED_INCIDENTS": False, "DSDOCTOR_PRELOAD": False,
                       "MAX_CONTENT_LENGTH": 2 * 1024 * 1024})


APP = _build_app()
schema = schemathesis.openapi.from_wsgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_api_conforms_to_its_openapi_document(case) -> None:
    case.call_and_validate(checks=CHECKS)
