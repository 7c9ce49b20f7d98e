"""The turn write, `PUT /v1/conversations/{conversation_id}/turns/{turn_id}`,
on a short path.

Devices write turns far more often than anything else, and through FastAPI
each write paid for dependency solving, a second validation of the receipt,
a hop through anyio's worker queue and the layers between the application's
middleware and its routes (exception middleware, exit stack, route
matching): several times the CPU the ledger spends on the turn. This
middleware, the innermost of the application's own (inside the edge limits
and the outage guard, which every request still passes), takes the requests
whose every part is plainly well formed (a canonical conversation UUID, a
turn id matching its pattern, a JSON body that validates as `TurnIn`) and
writes them with the same steps as the documented route in
`conversation_routes.py`: the same validation model, the same ledger call,
the same receipt model. An exception is answered by the handler the
application registered for its type, as Starlette's exception middleware
would answer it. Every other request, malformed ones included, is passed on
to FastAPI untouched, so refusals keep their exact answers.

The write is posted to the ledger's group committer from the event loop
and awaited there (`turn_queue.py`): the writes that arrive together are
written in one batch, with one token lookup and one hop to the event loop a
batch, not a request.
"""

from __future__ import annotations

import inspect
import json
import re
from uuid import UUID

from fastapi.security.utils import get_authorization_scheme_param
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from turnledger.infra.devices import Device
from turnledger.infra.http.limits import replay_body
from turnledger.infra.http.receipt_routes import requested_window
from turnledger.infra.http.service import Service
from turnledger.infra.service_layer.results import TurnRequest
from turnledger.infra.service_layer.window_requests import WindowRequest
from turnledger.infra.wire.schemas import TurnIn, TurnReceiptOut

PATH = "/v1/conversations/{conversation_id}/turns/{turn_id}"
# PATH as Starlette matches it: each parameter one or more characters but "/".
_PATH = re.compile(r"/v1/conversations/([^/]+)/turns/([^/]+)")

# Only the spellings FastAPI's validation surely accepts the same way; any
# other (hex without hyphens, braces, a bad turn id) takes the full route.
_CANONICAL_UUID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
# The TurnId path parameter of conversation_routes: pattern and 1-128 characters.
_TURN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")

_Parsed = tuple[UUID, str, TurnIn, str | None]


class TurnWritePath:
    """The short path, as ASGI middleware; add it before any other, so that
    it runs inside them (`create_app`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (
            _PATH.fullmatch(route_path(scope))
            if scope["type"] == "http" and scope["method"] == "PUT"
            else None
        )
        if match is None:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client went away
        parsed = _parse(scope, match, body)
        if parsed is None:
            await self.app(scope, replay_body(body, receive), send)
            return
        try:
            response = await _write(scope, parsed)
        except Exception as error:
            response = await answer_error(scope, error)
        await response(scope, receive, send)


async def _write(scope: Scope, parsed: _Parsed) -> Response:
    conversation_id, turn_id, turn, token = parsed
    receipt, headers = await record_turn(
        scope["app"].state.service, token, conversation_id, turn_id, turn
    )
    return Response(
        receipt.model_dump_json().encode(),
        media_type="application/json",
        headers=headers,
    )


async def record_turn(
    service: Service,
    token: str | None,
    conversation_id: UUID,
    turn_id: str,
    turn: TurnIn,
) -> tuple[TurnReceiptOut, dict[str, str]]:
    """Write `turn` for the device holding `token`: the one implementation of
    the turn write, whichever way the request came in. The write joins the
    batch of writes that arrive meanwhile (`turn_queue.py`) and wakes its
    user's long-polls. Returns the receipt and the response headers that
    carry the write's position back (read-your-writes on a replica)."""
    device, receipt, at = await service.turn_writes.write(
        token,
        conversation_id,
        lambda device: turn_request(
            device,
            conversation_id,
            turn_id,
            turn,
            window=requested_window(service, turn.window),
        ),
    )
    receipt_out = TurnReceiptOut(
        conversation_id=receipt.conversation_id,
        turn_id=receipt.turn_id,
        status=receipt.status.value,
        version=receipt.version,
        recorded_at=receipt.recorded_at,
    )
    service.signals.fire([device.user_id])
    return receipt_out, service.position_headers(device, at)


async def answer_error(scope: Scope, error: Exception) -> Response:
    """The application's answer to `error`: the handler registered for the
    nearest of its classes (what Starlette's exception middleware looks up),
    or the error raised on to the server-error middleware if there is none."""
    handlers = scope["app"].exception_handlers
    for kind in type(error).__mro__:
        handler = handlers.get(kind)
        if handler is not None:
            answer = handler(Request(scope), error)
            response = await answer if inspect.isawaitable(answer) else answer
            assert isinstance(response, Response)
            return response
    raise error


def turn_request(
    device: Device,
    conversation_id: UUID,
    turn_id: str,
    turn: TurnIn,
    *,
    window: WindowRequest | None = None,
) -> TurnRequest:
    """`turn` as the ledger takes it, written by `device` (both routes), with
    the window its answer replied to (`receipt_routes.requested_window`)."""
    parts = turn.turn_parts()
    # With parts, the question and answer travel inside them.
    return TurnRequest(
        owner_id=device.user_id,
        conversation_id=conversation_id,
        turn_id=turn_id,
        status=turn.status,
        question=None if parts is not None else turn.question,
        answer=None if parts is not None else turn.answer,
        parts=parts,
        expected_version=turn.expected_version,
        window=window,
    )


async def _read_body(receive: Receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def route_path(scope: Scope) -> str:
    """The path the application's routes match: without the root path the
    server was started with, as Starlette's router takes it off."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] == "/":
        return path[len(root) :]
    return path


def _parse(scope: Scope, match: re.Match[str], body: bytes) -> _Parsed | None:
    """The request's parts, if each is one FastAPI would accept as it is."""
    conversation_id, turn_id = match.group(1), match.group(2)
    if not _CANONICAL_UUID.fullmatch(conversation_id):
        return None
    if not _TURN_ID.fullmatch(turn_id):
        return None
    content_type = authorization = None
    for name, value in scope["headers"]:
        if name == b"content-type" and content_type is None:
            content_type = value
        elif name == b"authorization" and authorization is None:
            authorization = value.decode("latin-1")
    if (
        content_type is None
        or content_type.split(b";", 1)[0].strip().lower() != b"application/json"
    ):
        return None
    try:
        # As FastAPI reads a JSON body: json.loads, then the model's validation.
        turn = TurnIn.model_validate(json.loads(body))
    except Exception:  # whatever the fault, the documented route answers it
        return None
    # As fastapi.security.HTTPBearer(auto_error=False) reads the token.
    scheme, credentials = get_authorization_scheme_param(authorization)
    token = (
        credentials
        if authorization and scheme and credentials and scheme.lower() == "bearer"
        else None
    )
    return UUID(conversation_id), turn_id, turn, token
