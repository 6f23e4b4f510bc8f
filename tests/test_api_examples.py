"""Every example of the OpenAPI document runs as it is (what Swagger UI at /docs sends): each is
posted to a live service and answers 2xx. The examples that name blobs name the files of
tests/fixtures/example-checkpoint, uploaded first, as app/api/examples.py tells a reader to."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import uvicorn_server

from app.api.examples import EXAMPLE_CHECKPOINT, EXAMPLE_KIT, EXAMPLE_KIT_OPTIONS
from app.api.openapi import JobView
from app.client import Client
from app.kits.job import ModelRequest
from app.schemas.plans import PlanAnswer

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

CHECKPOINT = Path(__file__).resolve().parent / "fixtures" / "example-checkpoint"
LAST = "/v1/device-checks"  # it checks the kit the /v1/models example builds


def test_the_examples_name_the_committed_checkpoint():
    files = {p.name: p.read_bytes() for p in CHECKPOINT.iterdir()}
    assert {
        name: (hashlib.sha256(data).hexdigest(), len(data)) for name, data in files.items()
    } == (EXAMPLE_CHECKPOINT)
    digests = {name: f"sha256:{digest}" for name, (digest, _) in EXAMPLE_CHECKPOINT.items()}
    assert ModelRequest.create(digests, EXAMPLE_KIT_OPTIONS).key == EXAMPLE_KIT


def test_the_committed_checkpoint_is_the_one_its_recipe_writes(tmp_path):
    from kit_support import KIT_QWEN3, write_model

    written = write_model(tmp_path / "again", KIT_QWEN3, seed=0, dtype="float16")
    for path in CHECKPOINT.iterdir():
        assert (written / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[str]:
    """A service whose device checks run on the labelled stand-in for Core ML (this is Linux)."""
    with uvicorn_server(
        tmp_path_factory.mktemp("examples") / "data", device_check_runtime="stand-in"
    ) as url:
        yield url


def _examples(spec: dict) -> list[tuple[str, str, str, object]]:
    """(method, path, example name, body) of every request-body example, device checks last."""
    found = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            for media in content.values():
                for name, example in (media.get("examples") or {}).items():
                    found.append((method, path, name, example["value"]))
    return sorted(found, key=lambda e: e[1] == LAST)


def _wait(http: httpx.Client, job: str) -> dict:
    deadline = time.monotonic() + 300
    while (answer := http.get(f"/v1/jobs/{job}").json())["state"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    return answer


def test_every_example_of_the_openapi_document_answers_2xx(live):
    with Client(live) as client:
        for path in sorted(CHECKPOINT.iterdir()):
            client.upload_file(path)
    with httpx.Client(base_url=live, timeout=300) as http:
        examples = _examples(http.get("/openapi.json").json())
        ran = set()
        for method, path, name, body in examples:
            url = path.replace("{op}", str(body.get("op", ""))) if isinstance(body, dict) else path
            if path == LAST:
                assert _wait(http, EXAMPLE_KIT)["state"] == "succeeded"
            answer = http.request(method.upper(), url, json=body)
            assert 200 <= answer.status_code < 300, (path, name, answer.text)
            if path == "/v1/plan":
                PlanAnswer.model_validate(answer.json())  # the documented answer, field for field
            if path in ("/v1/models", LAST):
                assert answer.status_code == 202
                JobView.model_validate(answer.json())
            ran.add(path)
    assert {"/v1/plan", "/v1/models", "/v1/blobs/uploads", LAST, "/v1/kernels/{op}"} <= ran
