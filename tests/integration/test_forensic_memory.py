"""After a deletion, no object of the serving process holds the deleted text.

Python cannot wipe a string, so freed copies of an opened text stay in the
process's memory until the allocator reuses them (docs/deletion.md, "Process
memory"). What the code can promise is that it keeps none: no cache, queue
or buffer of opened text outlives the request that opened it, so nothing is
left for a deletion to drop. The test opens a turn's text every way a
service does (HTTP history, a window, the sync feed, the ledger's own
reads), deletes it, and walks every object the interpreter can reach (the
collector's objects and everything they refer to, untracked dicts and
tuples included) looking for the text: a cache added later that keeps an
opened text after its deletion fails here.
"""

from __future__ import annotations

import gc
import uuid
from pathlib import Path

from fastapi.testclient import TestClient

from turnledger.infra.http.app import create_app
from turnledger.infra.settings import Settings

OWNER = "memory-owner"


def holders(*needles: bytes) -> dict[bytes, list[str]]:
    """For each needle, what reachable object holds it (as text or UTF-8)."""
    gc.collect()
    texts = [(needle, needle.decode()) for needle in needles]
    seen: set[int] = {id(item) for pair in texts for item in pair}
    stack: list[object] = gc.get_objects()
    found: dict[bytes, list[str]] = {needle: [] for needle in needles}
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, str):
            for needle, text in texts:
                if text in item:
                    found[needle].append(f"str {item[:60]!r}")
            continue
        if isinstance(item, bytes | bytearray | memoryview):
            for needle, _ in texts:
                if needle in bytes(item):
                    found[needle].append(f"{type(item).__name__} {bytes(item)[:60]!r}")
            continue
        stack.extend(gc.get_referents(item))
    return found


def test_no_object_holds_a_deleted_text_after_its_deletion(tmp_path: Path) -> None:
    doomed = f"DOOMED{uuid.uuid4().hex}".encode()
    kept = f"KEPT{uuid.uuid4().hex}".encode()
    settings = Settings(_env_file=None, persistence="sqlite", data_dir=tmp_path / "d")
    app = create_app(settings)
    with TestClient(app) as http:
        auth = {
            "Authorization": "Bearer "
            + app.state.service.registry.add(OWNER, "phone").token
        }
        conversation = http.post("/v1/conversations", headers=auth).json()[
            "conversation_id"
        ]
        base = f"/v1/conversations/{conversation}"
        for turn_id, marker in (("t1", doomed), ("t2", kept)):
            assert (
                http.put(
                    f"{base}/turns/{turn_id}",
                    headers=auth,
                    json={
                        "question": f"Keep {marker.decode()} safe?",
                        "answer": f"Kept {marker.decode()}.",
                    },
                ).status_code
                == 200
            )
        # Every way a service opens the text.
        assert http.get(f"{base}/turns", headers=auth).status_code == 200
        window = {"question": "Next?", "system": "s", "model": "m", "max_bytes": 9000}
        assert http.post(f"{base}/window", headers=auth, json=window).status_code == 200
        assert http.get("/v1/sync", headers=auth).status_code == 200
        ledger = app.state.service.ledger
        conversation_id = uuid.UUID(conversation)
        assert doomed.decode() in str(
            ledger.get_history(OWNER, conversation_id).items[0]
        )
        # The check finds an opened text while something holds it.
        assert holders(kept, doomed) == {kept: [], doomed: []}
        held = ledger.get_history(OWNER, conversation_id)
        assert holders(doomed)[doomed] != []
        del held

        deleted = http.post(
            f"{base}/deletions", headers=auth, json={"turn_ids": ["t1"]}
        )
        assert deleted.status_code == 200, deleted.text
        del deleted
        assert holders(doomed) == {doomed: []}
        # Later reads open the kept turn only; the deleted one stays absent.
        assert http.get(f"{base}/turns", headers=auth).status_code == 200
        assert http.get("/v1/sync", headers=auth).status_code == 200
        assert holders(doomed) == {doomed: []}
