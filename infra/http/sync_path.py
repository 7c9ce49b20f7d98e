"""`GET /v1/sync` on a short path, as the turn write has one (turn_route.py).

Every delivered change costs each long-polling device a request, and through
FastAPI each paid for dependency solving (query, header and bearer parsing,
a thread hop for the token lookup) and the layers between the application's
middleware and its routes: more CPU than the read it asks for. This
middleware, beside `TurnWritePath` (inside the edge limits and the outage
guard), takes the sync requests whose every part is plainly well formed and
answers them with the route's own function (`sync_routes.answer_sync`). Every
other request, malformed ones included, goes on to FastAPI untouched, so
refusals keep their exact answers; an error is answered by the handler the
application registered for its type.
"""

from __future__ import annotations

import re

from fastapi.security.utils import get_authorization_scheme_param
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from turnledger.infra.http.sync_routes import (
    TIMEOUT_CEILING_SECONDS,
    SyncQuery,
    answer_sync,
)
from turnledger.infra.http.turn_route import answer_error, route_path
from turnledger.infra.wire.schemas import SYNC_LIMIT_MAX
from turnledger.infra.wire.status import POSITION_HEADER

PATH = "/v1/sync"
# Only spellings that mean the same before and after percent-decoding, and
# that FastAPI's validation surely reads the same way.
_TOKEN = re.compile(r"[A-Za-z0-9._-]{1,200}")
_TIMEOUT = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3})?")
_LIMIT = re.compile(r"[1-9][0-9]{0,3}")
_POSITION = POSITION_HEADER.lower().encode("latin-1")


class SyncReadPath:
    """The short path, as ASGI middleware (`create_app` adds it innermost)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        parsed = (
            parse_sync(scope)
            if scope["type"] == "http"
            and scope["method"] == "GET"
            and route_path(scope) == PATH
            else None
        )
        if parsed is None:
            await self.app(scope, receive, send)
            return
        token, query = parsed
        service = scope["app"].state.service
        try:
            device = await run_in_threadpool(service.registry.authenticate, token)
            response = await answer_sync(service, device, query, receive)
        except Exception as error:
            response = await answer_error(scope, error)
        await response(scope, receive, send)


def parse_sync(scope: Scope) -> tuple[str, SyncQuery] | None:
    """The token and the query, if each part is one FastAPI would accept as
    it is (the token still to be checked); None: leave it to the route."""
    values: dict[str, str] = {}
    raw: bytes = scope.get("query_string", b"")
    for pair in raw.split(b"&") if raw else ():
        name, equals, value = pair.partition(b"=")
        key = name.decode("latin-1")
        if not equals or key in values or key not in ("since", "timeout", "limit"):
            return None  # unknown, repeated or bare names: the route decides
        values[key] = value.decode("latin-1")
    since = values.get("since")
    if since is not None and not _TOKEN.fullmatch(since):
        return None
    timeout = values.get("timeout", "0")
    limit = values.get("limit", "100")
    if not _TIMEOUT.fullmatch(timeout) or not _LIMIT.fullmatch(limit):
        return None
    if float(timeout) > TIMEOUT_CEILING_SECONDS or int(limit) > SYNC_LIMIT_MAX:
        return None
    authorization = position = None
    for name, value in scope["headers"]:
        if name == b"authorization":
            if authorization is not None:
                return None
            authorization = value.decode("latin-1")
        elif name == _POSITION:
            if position is not None:
                return None
            position = value.decode("latin-1")
    if position is not None and not _TOKEN.fullmatch(position):
        return None
    # As fastapi.security.HTTPBearer(auto_error=False) reads the token; a
    # request without one is answered by the route.
    scheme, credentials = get_authorization_scheme_param(authorization)
    if not (authorization and credentials and scheme.lower() == "bearer"):
        return None
    return credentials, SyncQuery(since, float(timeout), int(limit), position)
