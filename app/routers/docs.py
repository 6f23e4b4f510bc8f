"""/docs (Swagger UI) and /redoc, working with no internet: their JS and CSS come from the
fastapi-offline package and are served by this app under /static/docs.

A Content-Security-Policy keeps the pages on this origin: the ReDoc bundle hard-codes a logo on
a CDN, and the policy stops the browser from even trying to fetch it (ReDoc then hides it).
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
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
SWAGGER_PARAMETERS = {"defaultModelsExpandDepth": 0, "displayRequestDuration": True}

router = APIRouter(include_in_schema=False)


def _page(response: HTMLResponse) -> HTMLResponse:
    response.headers["Content-Security-Policy"] = CSP
    return response


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return _page(
        get_swagger_ui_html(
            openapi_url=f"{root}{request.app.openapi_url}",
            title=f"{request.app.title} - Swagger UI",
            swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png",
            swagger_ui_parameters=SWAGGER_PARAMETERS,
        )
    )


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
