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
from collections import OrderedDict

from fastapi.security.utils import get_authorization_scheme_param
from starlette.types import ASGIApp, Receive, Scope, Send

from turnledger.domain.errors import UnauthenticatedError
from turnledger.infra.devices import Device, token_digest
from turnledger.infra.http.service import Service
from turnledger.infra.http.sync_routes import (
    TIMEOUT_CEILING_SECONDS,
    SyncQuery,
    answer_sync,
    in_thread,
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


# Devices kept by token digest (a few hundred bytes each), least recently
# used dropped first.
KEPT_DEVICES = 10_000


class SyncReadPath:
    """The short path, as ASGI middleware (`create_app` adds it innermost).

    It keeps the device of each token it has looked up, so a request with a
    known token takes no lookup of its own before reading: the device is
    looked up after the read instead, in the read's worker call (shared by
    the user's long-polls that join the read), and a revoked or unknown one
    is refused then, before anything is answered (`answer_sync`'s
    `credential`). What is kept is the device, keyed by the token's SHA-256
    digest, never the token; a refused request forgets it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._known: OrderedDict[bytes, Device] = OrderedDict()

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
        digest = token_digest(token)
        device = self._known.get(digest)
        kept = device is not None
        try:
            if device is None:
                device = await in_thread(service, service.registry.authenticate, token)
                self._keep(digest, device)
            else:
                self._known.move_to_end(digest)
            response = await answer_sync(service, device, query, receive, digest)
        except Exception as error:
            self._known.pop(digest, None)
            if kept and not isinstance(error, UnauthenticatedError):
                # As the route answers: a token that no longer authenticates
                # is refused before anything else is looked at.
                error = await _refusal(service, token) or error
            response = await answer_error(scope, error)
        await response(scope, receive, send)

    def _keep(self, digest: bytes, device: Device) -> None:
        self._known[digest] = device
        if len(self._known) > KEPT_DEVICES:
            self._known.popitem(last=False)


async def _refusal(service: Service, token: str) -> Exception | None:
    """The route's refusal of `token`, if it has one now."""
    try:
        await in_thread(service, service.registry.authenticate, token)
    except UnauthenticatedError as refused:
        return refused
    except Exception:
        return None
    return None


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
