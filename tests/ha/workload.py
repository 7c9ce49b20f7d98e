"""Devices writing and long-polling through the real service while faults happen.

Each writing device writes turns into a conversation of its own and sends every
turn again, with the same turn id, until it is acknowledged (200): the client's
side of "a 503 means not acknowledged". One more device per user long-polls
`/v1/sync` from the start and keeps every change it is given. Every answer is
kept, with when it was sent and answered, for the assertions (tests/ha) and
the figures (bench/failover_bench.py).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from turnledger.infra.wire.status import POSITION_HEADER

RETRY_PAUSE_SECONDS = 0.1
"""How long a device waits before sending a 503'd request again. Shorter than
the Retry-After the service announces, so the write pause is measured to the
tenth of a second; the service must answer such haste with 503s, not hang."""

LONG_POLL_SECONDS = 8.0


@dataclass(frozen=True, slots=True)
class Answer:
    device: str
    what: str  # "put", "read" (read-your-writes check) or "sync"
    sent: float
    answered: float
    status: int  # 0: no HTTP answer (the connection failed)
    retry_after: str | None
    detail: str = ""


@dataclass
class Ledger:
    """Everything the devices saw, shared by their threads."""

    answers: list[Answer] = field(default_factory=list)
    acknowledged: dict[str, dict[str, Any]] = field(default_factory=dict)
    """turn id -> the receipt its first 200 carried."""
    acknowledged_at: dict[str, float] = field(default_factory=dict)
    receipt_mismatches: list[str] = field(default_factory=list)
    stale_reads: list[str] = field(default_factory=list)
    delivered: dict[str, list[str]] = field(default_factory=dict)
    """user -> turn ids its long-polling device was given, in order."""
    delivered_at: dict[str, float] = field(default_factory=dict)
    """turn id -> when a long-poll first brought it."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keep(self, answer: Answer) -> None:
        with self.lock:
            self.answers.append(answer)


def _send(
    http: httpx.Client, ledger: Ledger, device: str, what: str, request: httpx.Request
) -> httpx.Response | None:
    sent = time.monotonic()
    try:
        response = http.send(request)
    except httpx.TransportError as error:
        ledger.keep(Answer(device, what, sent, time.monotonic(), 0, None, repr(error)))
        return None
    detail = response.text[:300] if response.status_code >= 500 else ""
    if response.status_code not in (200, 503):
        detail = response.text[:300]
    ledger.keep(
        Answer(
            device,
            what,
            sent,
            time.monotonic(),
            response.status_code,
            response.headers.get("retry-after"),
            detail,
        )
    )
    return response


@dataclass
class Writer:
    base_url: str
    token: str
    name: str
    conversation: str
    check_reads: bool = False
    """After each acknowledged write, read the history with the position the
    write handed back: the turn must be there (read-your-writes)."""

    def run(self, ledger: Ledger, stop: threading.Event) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=30) as http:
            n = 0
            while not stop.is_set():
                n += 1
                self.write(http, ledger, f"{self.name}-{n}", n, stop)

    def write(
        self,
        http: httpx.Client,
        ledger: Ledger,
        turn_id: str,
        n: int,
        stop: threading.Event,
    ) -> None:
        path = f"/v1/conversations/{self.conversation}/turns/{turn_id}"
        body = {"question": f"q {turn_id}", "answer": f"a {turn_id}"}
        # Sent until acknowledged, even after `stop`: a turn sent once is
        # either acknowledged or the test's retry later finds it unanswered.
        while True:
            response = _send(
                http,
                ledger,
                self.name,
                "put",
                http.build_request("PUT", path, json=body),
            )
            if response is not None and response.status_code == 200:
                break
            if stop.is_set() and response is not None:
                return  # left unacknowledged; `finish` sends it again
            time.sleep(RETRY_PAUSE_SECONDS)
        receipt = response.json()
        with ledger.lock:
            ledger.acknowledged.setdefault(turn_id, receipt)
            ledger.acknowledged_at.setdefault(turn_id, time.monotonic())
            if ledger.acknowledged[turn_id] != receipt:
                ledger.receipt_mismatches.append(turn_id)
        if self.check_reads:
            self.read_back(http, ledger, turn_id, n, response)

    def read_back(
        self,
        http: httpx.Client,
        ledger: Ledger,
        turn_id: str,
        n: int,
        written: httpx.Response,
    ) -> None:
        position = written.headers.get(POSITION_HEADER)
        headers = {POSITION_HEADER: position} if position else {}
        while True:
            request = http.build_request(
                "GET",
                f"/v1/conversations/{self.conversation}/turns",
                params={"offset": max(0, n - 3), "limit": 10},
                headers=headers,
            )
            response = _send(http, ledger, self.name, "read", request)
            if response is not None and response.status_code == 200:
                break
            time.sleep(RETRY_PAUSE_SECONDS)
        if turn_id not in [item["turn_id"] for item in response.json()["items"]]:
            with ledger.lock:
                ledger.stale_reads.append(turn_id)


@dataclass
class LongPoller:
    base_url: str
    token: str
    user: str
    cursor: str | None = None

    def run(self, ledger: Ledger, stop: threading.Event) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=30) as http:
            while not stop.is_set():
                self.poll_once(http, ledger)

    def poll_once(self, http: httpx.Client, ledger: Ledger) -> bool:
        """One long-poll; True if it brought changes."""
        params: dict[str, Any] = {"timeout": LONG_POLL_SECONDS, "limit": 500}
        if self.cursor is not None:
            params["since"] = self.cursor
        request = http.build_request("GET", "/v1/sync", params=params)
        response = _send(http, ledger, f"{self.user}-poll", "sync", request)
        if response is None or response.status_code != 200:
            time.sleep(RETRY_PAUSE_SECONDS)
            return False
        page = response.json()
        turns = [
            change["turn_id"]
            for change in page["changes"]
            if change["kind"] == "turn_recorded"
        ]
        now = time.monotonic()
        with ledger.lock:
            ledger.delivered.setdefault(self.user, []).extend(turns)
            for turn_id in turns:
                ledger.delivered_at.setdefault(turn_id, now)
        self.cursor = page["next_cursor"]
        return bool(page["changes"])


@dataclass
class Workload:
    writers: list[Writer]
    pollers: list[LongPoller]
    ledger: Ledger = field(default_factory=Ledger)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for part in [*self.writers, *self.pollers]:
            thread = threading.Thread(
                target=part.run, args=(self.ledger, self.stop), daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def finish(self, catch_up_seconds: float = 30.0) -> None:
        """Stop writing; let the long-polls catch up with every acknowledged
        turn (or give up after `catch_up_seconds`)."""
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
        deadline = time.monotonic() + catch_up_seconds
        for poller in self.pollers:
            headers = {"Authorization": f"Bearer {poller.token}"}
            with httpx.Client(
                base_url=poller.base_url, headers=headers, timeout=30
            ) as http:
                while time.monotonic() < deadline and self.undelivered(poller.user):
                    poller.poll_once(http, self.ledger)

    def undelivered(self, user: str) -> set[str]:
        with self.ledger.lock:
            mine = {
                turn_id
                for turn_id in self.ledger.acknowledged
                if turn_id.startswith(f"{user}-")
            }
            return mine - set(self.ledger.delivered.get(user, []))

    def first_acknowledged_after(self, moment: float) -> float | None:
        """When the first write sent after `moment` was acknowledged."""
        with self.ledger.lock:
            times = [
                a.answered
                for a in self.ledger.answers
                if a.what == "put" and a.status == 200 and a.sent >= moment
            ]
        return min(times, default=None)
