"""/docs (Swagger UI) and /redoc, working with no internet: their JS and CSS come from the
fastapi-offline package and are served by this app under /static/docs.

The Swagger page carries the OpenAPI document in itself rather than fetching it after the page
has loaded: it is drawn while the page loads, so a browser that reads or prints the page when
loading ends (`chromium --headless --dump-dom`, `--screenshot`, a crawler) sees the operations,
not a spinner.

A Content-Security-Policy keeps the pages on this origin: the ReDoc bundle hard-codes a logo on
a CDN, and the policy stops the browser from even trying to fetch it (ReDoc then hides it).
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).parent / "static"
STATIC_URL = "/static/docs"
CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline'",  # the pages boot the bundles with inline scripts
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "worker-src 'self' blob:",  # ReDoc's search runs in a blob: worker
        "connect-src 'self'",
    ]
)
SWAGGER_PARAMETERS = {
    "dom_id": "#swagger-ui",
    "layout": "BaseLayout",
    "deepLinking": True,
    "showExtensions": True,
    "showCommonExtensions": True,
    "defaultModelsExpandDepth": 0,
    "displayRequestDuration": True,
}
SWAGGER_PAGE = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link type="text/css" rel="stylesheet" href="{static}/swagger-ui.css">
<link rel="shortcut icon" href="{static}/favicon.png">
<title>{title}</title>
</head>
<body>
<div id="swagger-ui"></div>
<script src="{static}/swagger-ui-bundle.js"></script>
<script>
SwaggerUIBundle(Object.assign({parameters}, {{
  spec: {spec},
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
}}));
</script>
</body>
</html>
"""

router = APIRouter(include_in_schema=False)


def _page(response: HTMLResponse) -> HTMLResponse:
    response.headers["Content-Security-Policy"] = CSP
    return response


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    schema = request.app.openapi()
    if root and not schema.get("servers"):
        schema = {**schema, "servers": [{"url": root}]}  # requests go where the page is served
    # inside a <script>: no "</" may end it early
    spec = json.dumps(schema, separators=(",", ":")).replace("</", "<\\/")
    html = SWAGGER_PAGE.format(
        title=escape(f"{request.app.title} - Swagger UI"),
        static=f"{root}{STATIC_URL}",
        spec=spec,
        parameters=json.dumps(SWAGGER_PARAMETERS),
    )
    return _page(HTMLResponse(html))


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return _page(
        get_redoc_html(
            openapi_url=f"{root}{request.app.openapi_url}",
            title=f"{request.app.title} - ReDoc",
            redoc_js_url=f"{root}{STATIC_URL}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            with_google_fonts=False,
        )
    )


def install(app: FastAPI) -> None:
    app.mount(STATIC_URL, StaticFiles(directory=ASSETS), name="docs-assets")
    app.include_router(router)
