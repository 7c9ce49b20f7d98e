"""The attacker of the deletion tests: a copy of everything, plus the master key.

`write_scenario` writes a conversation whose turns carry unique markers (ASCII
and CJK), with window receipts, a fold and snapshots. Before the deletion the
test records every wrapped key of the conversation by reading the key table;
after it, the attacker gets copies of the files (and a dump) and, holding the
master key, looks for every recorded wrapped key (raw, hex, base64), unwraps
whatever it finds and tries to decrypt every sealed text of the conversation's
log with it. A positive control runs the same attack for the surviving turns,
so "0 readable" cannot come from an attack that never works.
"""

from __future__ import annotations

import base64
import os
import random
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from turnledger.domain.conversation import fold_key_id
from turnledger.domain.errors import TurnKeyDamagedError
from turnledger.infra.service_layer.application import Conversations
from turnledger.infra.sqlite_keys import MEMORY, SQLiteKeyStore
from turnledger.infra.vault import KeyVault, MasterKeyError

OWNER = "forensic-owner"
TURNS = 10
DOOMED = ("t1", "t2", "t4", "t7")  # t1, t2: covered by the fold, withdrawn with them


@dataclass
class Scenario:
    conversation_id: UUID
    markers: dict[str, list[str]]  # turn id -> markers written in its text
    fold_id: str
    doomed: tuple[str, ...] = DOOMED
    kept: tuple[str, ...] = ()
    sealed: list[tuple[str, str, bytes]] = field(default_factory=list)


def _cjk_marker() -> str:
    rng = random.Random(uuid.uuid4().int)
    return "秘" + "".join(chr(rng.randrange(0x4E00, 0x9FA0)) for _ in range(8))


def write_scenario(ledger: Conversations) -> Scenario:
    conversation_id = ledger.start_conversation(OWNER)
    markers: dict[str, list[str]] = {}
    for index in range(TURNS):
        turn_id = f"t{index}"
        ascii_marker = f"MARK{uuid.uuid4().hex}"
        cjk_marker = _cjk_marker()
        markers[turn_id] = [ascii_marker, cjk_marker]
        question = f"Please keep {ascii_marker} and {cjk_marker} safe ({index})."
        answer = f"Kept: {ascii_marker} / {cjk_marker}."
        window = ledger.project_window(
            OWNER,
            conversation_id,
            question=question,
            system="sys",
            model="m",
            max_bytes=100_000,
        )
        ledger.confirm_turn(
            OWNER,
            conversation_id,
            turn_id=turn_id,
            question=question,
            answer=answer,
            window=window,
        )
    fold_marker = f"FOLD{uuid.uuid4().hex}"
    markers[fold_key_id("f1")] = [fold_marker]
    ledger.record_fold(
        OWNER,
        conversation_id,
        covers_through_turn_id="t2",
        summary=f"Summary of t0..t2 with {fold_marker}",
        fold_id="f1",
        summarized_version=ledger.get_conversation(OWNER, conversation_id).version,
    )
    scenario = Scenario(conversation_id=conversation_id, markers=markers, fold_id="f1")
    scenario.kept = tuple(t for t in markers if t.startswith("t") and t not in DOOMED)
    scenario.sealed = sealed_items(ledger, conversation_id)
    return scenario


def sealed_items(
    ledger: Conversations, conversation_id: UUID
) -> list[tuple[str, str, bytes]]:
    """Every sealed text of the conversation's log: (key id, field, sealed)."""
    items = []
    for event in ledger.events.get(conversation_id):
        fields = vars(event)
        key_id = fields.get("turn_id") or (
            fold_key_id(fields["fold_id"]) if "fold_id" in fields else None
        )
        for name, value in fields.items():
            if name.startswith("sealed_") and isinstance(value, bytes) and key_id:
                items.append((str(key_id), name.removeprefix("sealed_"), value))
    return items


def forms(secret: bytes) -> list[bytes]:
    """Raw, hex (pg_dump, bytea output) and base64 (JSON) forms of a secret."""
    return [
        secret,
        secret.hex().encode(),
        base64.b64encode(secret),
        base64.urlsafe_b64encode(secret),
    ]


def files_under(directory: Path) -> Iterator[Path]:
    for root, _, names in os.walk(directory):
        for name in names:
            yield Path(root) / name


def read_all(paths: Iterable[Path]) -> dict[str, bytes]:
    contents = {}
    for path in paths:
        try:
            contents[str(path)] = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            continue
    return contents


def hits(contents: Mapping[str, bytes], needles: Mapping[str, bytes]) -> list[str]:
    """'label in file' for every needle found."""
    return [
        f"{label} in {name}"
        for name, content in contents.items()
        for label, needle in needles.items()
        if needle in content
    ]


def needles(
    scenario: Scenario, wrapped: Mapping[str, bytes], master_key: bytes
) -> dict[str, bytes]:
    """Markers of the destroyed items, their wrapped and raw keys in every form."""
    vault = KeyVault(SQLiteKeyStore(MEMORY), master_key)
    found: dict[str, bytes] = {}
    for key_id, blob in wrapped.items():
        for marker in scenario.markers.get(key_id, []):
            found[f"marker {marker} of {key_id}"] = marker.encode("utf-8")
        raw = vault._unwrap(scenario.conversation_id, key_id, blob)
        for index, form in enumerate(forms(blob)):
            found[f"wrapped key of {key_id} (form {index})"] = form
        for index, form in enumerate(forms(raw)):
            found[f"data key of {key_id} (form {index})"] = form
    return found


def attack(
    scenario: Scenario,
    contents: Mapping[str, bytes],
    recorded: Mapping[str, bytes],
    master_key: bytes,
) -> dict[str, list[str]]:
    """Texts the attacker opens, per key id, with keys found in `contents`.

    For each recorded wrapped key found anywhere in the copies (raw, hex or
    base64), unwrap it with the master key and decrypt every sealed text of
    the log with it.
    """
    opened: dict[str, list[str]] = {}
    for key_id, blob in recorded.items():
        if not any(
            form in content for content in contents.values() for form in forms(blob)
        ):
            continue
        store = SQLiteKeyStore(MEMORY)
        store.put_if_absent(scenario.conversation_id, key_id, blob)
        vault = KeyVault(store, master_key)
        items = [item for item in scenario.sealed if item[0] == key_id]
        try:
            texts = vault.open_many(scenario.conversation_id, items, OWNER)
        except (MasterKeyError, TurnKeyDamagedError):  # not a key: damaged
            continue
        readable = [text for text in texts if text is not None]
        if readable:
            opened[key_id] = readable
    return opened
