"""/docs and /redoc work offline: headless Chromium with every non-loopback request aborted lists
the operations and runs "Try it out" on conv with the documented example, getting a 200 zip."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LOOPBACK = re.compile(r"^https?://127\.0\.0\.1(:\d+)?/")

pytestmark = [
    pytest.mark.slow,  # the slow tier: `make test` runs it, `make test-fast` does not
    pytest.mark.skipif(
        not Path(CHROMIUM).exists(),
        reason="Debian's chromium is not installed (make test installs it)",
    ),
]


def test_docs_pages_reference_no_cdn(client):
    for page in ("/docs", "/redoc"):
        response = client.get(page)
        assert "default-src 'self'" in response.headers["content-security-policy"]
        html = response.text
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources, page
        assert all(s.startswith("/") for s in sources), sources
        assert "cdn" not in html.lower()
    for asset in re.findall(r'(?:src|href)="([^"]+)"', client.get("/docs").text):
        assert client.get(asset).status_code == 200, asset


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _offline_page(browser, blocked: list[str]):
    page = browser.new_page(viewport={"width": 1280, "height": 2000})

    def route(r):
        if LOOPBACK.match(r.request.url):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return page


def test_swagger_try_it_out_on_conv(browser, server, tmp_path):
    blocked: list[str] = []
    page = _offline_page(browser, blocked)
    page.goto(f"{server.url}/docs")
    page.wait_for_selector(".opblock", timeout=30_000)
    summaries = page.locator(".opblock-summary-path").all_inner_texts()
    for path in ("/v1/ops", "/v1/kernels/{op}", "/v1/kernels", "/v1/blobs", "/v1/info"):
        assert any(s.replace("\u200b", "") == path for s in summaries), summaries

    op = page.locator("#operations-kernels-build_kernel_for_op_v1_kernels__op__post")
    op.locator(".opblock-summary").click()
    op.get_by_role("button", name="Try it out").click()
    op.locator("tr[data-param-name='op'] select").select_option("conv")
    op.get_by_role("button", name="Execute").click()
    status = op.locator(".live-responses-table tbody .response-col_status").first
    status.wait_for(timeout=60_000)
    assert status.inner_text().strip().startswith("200"), status.inner_text()
    assert "application/zip" in op.locator(".live-responses-table").inner_text()

    shot = Path(os.environ.get("ANE_SCREENSHOT_DIR", tmp_path)) / "docs-try-it-out.png"
    op.scroll_into_view_if_needed()
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert blocked == []  # the page never tried to leave loopback
    page.close()


def test_redoc_renders_offline(browser, server):
    blocked: list[str] = []
    page = _offline_page(browser, blocked)
    page.goto(f"{server.url}/redoc")
    page.get_by_role("heading", name="The op catalog").wait_for(timeout=30_000)
    page.get_by_text("Build a kernel (op in the path)").first.wait_for(state="attached")
    assert blocked == []
    page.close()


def test_openapi_example_for_conv_builds(server):
    """The example Swagger UI sends is the documented one; it must build as is."""
    spec = httpx.get(f"{server.url}/openapi.json").json()
    body = spec["paths"]["/v1/kernels/{op}"]["post"]["requestBody"]["content"]
    example = body["application/json"]["examples"]["conv_inline"]["value"]
    r = httpx.post(f"{server.url}/v1/kernels/conv", json=example)
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"


def test_swagger_is_drawn_while_the_page_loads(server):
    """What a headless browser prints when loading ends, with no time budget to wait for
    scripts (the trial's screenshot caught only the spinner): every operation, and an intro that
    says what the service builds (kernels and model kits)."""
    import subprocess

    spec = httpx.get(f"{server.url}/openapi.json").json()
    operations = sum(len(ops) for ops in spec["paths"].values())
    dom = subprocess.run(
        [CHROMIUM, *ARGS, "--dump-dom", f"{server.url}/docs"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert dom.count('class="opblock-summary-path"') == operations
    assert "Model kits" in dom and "/v1/models" in dom and "/v1/kernels/{op}" in dom
