"""The web page: static files shipped in the package, served same-origin under
a strict Content-Security-Policy (docs/web.md).

Nothing is inlined and nothing comes from another origin: scripts, styles and
requests are all 'self', so a turn's text, even if it were ever parsed as
HTML, could run no script and load nothing.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, RedirectResponse, Response

from turnledger.infra.http.errors import error_response

WEB_ROOT = Path(__file__).resolve().parent / "web"

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

router = APIRouter(include_in_schema=False)


def _web_files() -> dict[str, Path]:
    """Every servable file by its URL path under /app/, fixed at import."""
    return {
        path.relative_to(WEB_ROOT).as_posix(): path
        for path in sorted(WEB_ROOT.rglob("*"))
        if path.is_file() and path.suffix in MEDIA_TYPES
    }


WEB_FILES = _web_files()


@router.get("/")
async def root() -> Response:
    return RedirectResponse("/app/", status_code=307)


@router.get("/app/")
async def index() -> Response:
    return _file("index.html")


@router.get("/app/{name:path}")
async def web_file(name: str) -> Response:
    return _file(name)


def _file(name: str) -> Response:
    path = WEB_FILES.get(name)
    if path is None:
        return error_response(404, "not_found", "Not Found")
    return FileResponse(
        path, media_type=MEDIA_TYPES[path.suffix], headers=SECURITY_HEADERS
    )
