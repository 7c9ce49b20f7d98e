"""What the routes share: the ledger, the change feed, devices, cursors, wake-ups."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Header, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from turnledger.infra.devices import Device, DeviceRegistry
from turnledger.infra.http.cursor import CursorCodec
from turnledger.infra.http.notifier import UserSignals
from turnledger.infra.http.reads import ReadRouter
from turnledger.infra.http.standbys import Standby
from turnledger.infra.http.turn_queue import LoopTurnWrites
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.service_layer.feed import ConversationFeed
from turnledger.infra.settings import Settings
from turnledger.infra.tokenizers import token_counter
from turnledger.infra.wire.status import POSITION_HEADER
from turnledger.projections.tokens import TokenCounter

# The thread that leads the group committer's batches when the event loop's
# turn writes start one (infra/http/turn_queue.py): one batch at a time.
WRITE_THREADS = 1
# The threads sync reads run on (infra/http/sync_routes.py): a plain executor
# is a cheaper hop from the event loop than the thread pool of Starlette's
# `run_in_threadpool`, and every long-poll answer takes one.
SYNC_READ_THREADS = 16

ClientPosition = Annotated[
    str | None,
    Header(
        alias=POSITION_HEADER,
        max_length=200,
        description="the TurnLedger-Position of a previous response: with reads "
        "on a replica, this read sees at least what that response saw or wrote",
    ),
]


@dataclass
class Service:
    settings: Settings
    ledger: Conversations
    registry: DeviceRegistry
    cursors: CursorCodec
    standbys: list[Standby] = field(default_factory=list)
    feed: ConversationFeed = field(init=False)
    reads: ReadRouter = field(init=False)
    signals: UserSignals = field(init=False)
    turn_writes: LoopTurnWrites = field(init=False)

    _counters: dict[str, TokenCounter] = field(default_factory=dict)
    _write_threads: ThreadPoolExecutor | None = None
    _sync_threads: ThreadPoolExecutor | None = None

    def __post_init__(self) -> None:
        self.feed = ConversationFeed(self.ledger)
        self.reads = ReadRouter(
            self.ledger,
            self.feed,
            self.standbys,
            max_wait_seconds=self.settings.postgres_replica_max_wait_seconds,
            strict=self.settings.postgres_replica_reads == "strict",
        )
        self.signals = UserSignals(
            per_device=self.settings.http_max_long_polls_per_device,
            per_user=self.settings.http_max_long_polls_per_user,
        )
        self.turn_writes = LoopTurnWrites(
            self.registry,
            self.ledger,
            self.reads,
            self.write_threads,
        )

    def required_position(self, device: Device, token: str | None) -> int:
        """The WAL position a read must see, from the client's header."""
        return 0 if token is None else self.cursors.decode_wal(device.user_id, token)

    def hand_back(self, response: Response, device: Device, position: int) -> None:
        """Tell the client the position to send with its next reads."""
        response.headers.update(self.position_headers(device, position))

    def position_headers(self, device: Device, position: int) -> dict[str, str]:
        """The header that carries `position` back to `device`, if any."""
        if not position:
            return {}
        return {POSITION_HEADER: self.cursors.encode_wal(device.user_id, position)}

    def write_threads(self) -> ThreadPoolExecutor:
        """The pool that leads turn writes' batches (made on first use)."""
        if self._write_threads is None:
            self._write_threads = ThreadPoolExecutor(
                WRITE_THREADS, thread_name_prefix="turnledger-write"
            )
        return self._write_threads

    def sync_threads(self) -> ThreadPoolExecutor:
        """The pool sync reads run in (made on first use)."""
        if self._sync_threads is None:
            self._sync_threads = ThreadPoolExecutor(
                SYNC_READ_THREADS, thread_name_prefix="turnledger-sync"
            )
        return self._sync_threads

    def close_write_threads(self) -> None:
        """At shutdown: writes (and sync reads) still waiting finish on their
        own threads."""
        threads, self._write_threads = self._write_threads, None
        if threads is not None:
            threads.shutdown(wait=False)
        readers, self._sync_threads = self._sync_threads, None
        if readers is not None:
            readers.shutdown(wait=False)

    def close_standbys(self) -> None:
        """At shutdown: close the standbys' ledgers (this service opened them)."""
        for standby in self.standbys:
            standby.close()

    def token_counter(self, name: str) -> TokenCounter:
        """The named counter, loaded once (tiktoken encodings take a while)."""
        counter = self._counters.get(name)
        if counter is None:
            counter = self._counters[name] = token_counter(name)
        return counter


async def get_service(request: Request) -> Service:
    # `async`: FastAPI runs a plain `def` dependency in its thread pool, and a
    # hop to a worker thread costs more than this attribute read.
    service: Service = request.app.state.service
    return service


_bearer = HTTPBearer(
    auto_error=False,
    description="a device token from `turnledger device add` or POST /v1/devices",
)


async def bearer_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str | None:
    """The token as sent, unchecked: for routes that authenticate in the same
    worker-thread call as their work (one thread hop per request, not two)."""
    return credentials.credentials if credentials else None


def current_device(
    service: Annotated[Service, Depends(get_service)],
    token: Annotated[str | None, Depends(bearer_token)],
) -> Device:
    """The calling device; 401 for a missing, unknown or revoked token."""
    return service.registry.authenticate(token)
