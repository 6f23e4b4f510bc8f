"""Property-based requests generated from the live /openapi.json: no 5xx (bar the documented 503
problems), and every response conforms to the documented schema (status code, content type,
headers, body).

schemathesis' own pytest plugin (`from_fixture`) does not run under this pytest version, so the
schema is loaded from the live server inside the test and each operation's strategy is driven
by hypothesis directly; every operation is exercised and all failures are reported together.
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from http_support import metric
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error, positive_data_acceptance

from app.api.problems import MEDIA_TYPE

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,  # the same examples on every run: a failure here is reproducible
    suppress_health_check=list(HealthCheck),
    database=None,
)


# Excluded: "schema-valid data must be accepted". Which weights a request needs, and their
# shapes, follow from its params (and digests must name uploaded blobs): JSON Schema cannot
# say that, so a schema-valid body can rightly get a 422. And schemathesis' "no 5xx", which
# counts the documented 503 (no compiler on this machine for format mlmodelc) as a failure:
# `run` below checks 5xx itself, allowing only that 503 as a problem document.
EXCLUDED = [positive_data_acceptance, not_a_server_error]


def _exercise(operation, mode: GenerationMode) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @SETTINGS
    def run(case) -> None:
        response = case.call_and_validate(excluded_checks=EXCLUDED)
        if response.status_code >= 500:
            assert response.status_code == 503, response.text
            content_type = response.headers["content-type"]  # schemathesis lists header values
            assert content_type in (MEDIA_TYPE, [MEDIA_TYPE]), content_type

    run()


def test_openapi_contract(server):
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    labels = {op.label for op in operations}
    assert "POST /v1/kernels/{op}" in labels and "POST /v1/blobs" in labels
    failures = {}
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _exercise(operation, mode)
            except Unsatisfiable:
                # An operation without parameters or body has no invalid input to generate.
                assert mode is GenerationMode.NEGATIVE, operation.label
            except Exception as exc:  # collect them all: one bad route must not hide another
                failures[f"{operation.label} ({mode.value})"] = f"{type(exc).__name__}: {exc}"
    assert not failures, "\n\n".join(f"{k}\n{v}" for k, v in failures.items())
    with httpx.Client(base_url=server.url) as client:  # the generated requests did reach it
        assert metric(client, "ane_http_requests_total", route="/v1/kernels/{op}") >= 6
        assert metric(client, "ane_http_requests_total", route="/v1/blobs") >= 6
