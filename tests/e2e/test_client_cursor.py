"""The sync loop's cursor across killed processes: nothing lost, nothing applied twice.

A device process (tests/e2e/sync_child.py) pulls the feed into a journal with
a file cursor store, three changes a batch; it is killed, started again, and
must end with exactly the changes a fresh pull returns, each once, in order.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ROOT, Server, start_server, stop_server
from turnledger.infra.client import Client, MemoryCursorStore
from turnledger.infra.devices import open_device_registry
from turnledger.infra.settings import Settings


@pytest.fixture
def device(tmp_path: Path) -> Iterator[tuple[Server, str]]:
    settings = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path / "d")
    registry = open_device_registry(settings)
    token = registry.add("alice", "phone").token
    registry.close()
    server = start_server(settings, tmp_path / "server.log")
    yield server, token
    stop_server(server)


def _write_turns(api: Client, conversations: int, turns: int) -> None:
    for c in range(conversations):
        conversation = api.start_conversation(client_key=f"c{c}").conversation_id
        for n in range(turns):
            api.put_turn(conversation, f"t{n}", question=f"q{n}", answer=f"a{n}")


def _child(
    server: Server, token: str, tmp_path: Path, **env: str
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.e2e.sync_child",
            server.base_url,
            token,
            str(tmp_path / "cursor"),
            str(tmp_path / "journal.jsonl"),
            str(tmp_path / "deliveries.jsonl"),
        ],
        cwd=ROOT,
        env={**os.environ, **env},  # every TURNLEDGER_* setting of this process
    )


def _lines(path: Path) -> list[tuple[str, int]]:
    return [
        (record["conversation_id"], record["version"])
        for record in map(json.loads, path.read_text().splitlines())
    ]


def _every_change(api: Client) -> list[tuple[str, int]]:
    changes: list[Any] = []
    api.pull(MemoryCursorStore(), changes.extend, limit=1000)
    return [(str(c.conversation_id), c.version) for c in changes]


def test_a_crash_between_handling_and_saving_hands_that_batch_over_again(
    device: tuple[Server, str], tmp_path: Path
) -> None:
    server, token = device
    with Client(server.base_url, token) as api:
        _write_turns(api, conversations=1, turns=12)
        expected = _every_change(api)
    assert len(expected) == 13

    crashed = _child(server, token, tmp_path, TURNLEDGER_TEST_CRASH_AFTER_BATCH="2")
    assert crashed.wait(timeout=60) == 9
    assert _lines(tmp_path / "journal.jsonl") == expected[:6]
    finished = _child(server, token, tmp_path)
    assert finished.wait(timeout=60) == 0

    # Batch 2 was handled but its cursor not saved: it came again, and the
    # journal's versions kept it from being applied twice.
    delivered = _lines(tmp_path / "deliveries.jsonl")
    assert delivered == expected[:6] + expected[3:]
    assert _lines(tmp_path / "journal.jsonl") == expected
    # Caught up: one more run is handed nothing.
    assert _child(server, token, tmp_path).wait(timeout=60) == 0
    assert _lines(tmp_path / "deliveries.jsonl") == delivered


def test_processes_killed_at_random_moments_lose_and_duplicate_nothing(
    device: tuple[Server, str], tmp_path: Path
) -> None:
    server, token = device
    with Client(server.base_url, token) as api:
        _write_turns(api, conversations=2, turns=20)
        expected = _every_change(api)
    chance = random.Random(13)
    kills = 0
    for _ in range(4):
        child = _child(server, token, tmp_path, TURNLEDGER_TEST_CHANGE_DELAY="0.02")
        time.sleep(chance.uniform(0.3, 0.9))
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            kills += 1
        child.wait(timeout=60)
    assert kills >= 2, "the child finished before it could be killed"
    assert _child(server, token, tmp_path).wait(timeout=60) == 0
    assert _lines(tmp_path / "journal.jsonl") == expected
    delivered = _lines(tmp_path / "deliveries.jsonl")
    assert set(delivered) == set(expected)
