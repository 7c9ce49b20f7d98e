"""Benchmark: a window over 10,000 tool-heavy turns against text-only turns.

Two conversations of the same length are built through the public API in one
in-memory store (and, with --sqlite, in one SQLite store; with --postgres, in
a schema of its own on PostgreSQL, dropped afterwards): one of text-only
turns, one of tool-heavy turns (an image, two rounds of two tool calls and
their results, assistant text, the answer). Each text-only turn carries the
same texts as its tool-heavy twin (the step texts joined into its answer), so
the two differ in structure, not in volume. A third conversation holds the
same tool-heavy turns with the ids some OpenAI-compatible servers emit
(`functions.get_weather:0`, the same in every turn): Anthropic refuses them
and every request sees them again, so each window maps them to wire ids
(docs/tools.md). The same 50-turn policy is projected from each, in every
wire format; the figure is the ratio of the median times, required to be at
most 2x for both tool-heavy conversations. Then a window of each format is
kept as a turn's receipt and an audit must re-derive every receipt.

    .venv/bin/python bench/tool_window.py                 # 10,000 turns, memory
    .venv/bin/python bench/tool_window.py --sqlite --turns 10000
    .venv/bin/python bench/tool_window.py --postgres    # and on PostgreSQL
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turnledger.domain.parts import (  # noqa: E402
    AssistantText,
    Attachment,
    ToolCall,
    ToolResult,
    TurnParts,
)
from turnledger.infra.persistence import open_conversations  # noqa: E402
from turnledger.infra.service_layer.application import Conversations  # noqa: E402
from turnledger.infra.service_layer.audit import Auditor  # noqa: E402
from turnledger.infra.settings import Settings  # noqa: E402
from turnledger.infra.vault import new_master_key  # noqa: E402
from turnledger.projections.formats import WIRE_FORMATS  # noqa: E402
from turnledger.projections.policy import WindowPolicy  # noqa: E402

OWNER = "bench"
SYSTEM = "You are a helpful assistant with tools."
QUESTION = "What changed since yesterday? 请简要总结。"
LIMIT = 2.0
CITIES = ["Paris", "東京", "São Paulo", "Zürich", "서울", "New York"]


def tool_turn(rng: random.Random, index: int, reused_ids: bool = False) -> TurnParts:
    steps: list[object] = [AssistantText("Let me check the weather and the time.")]
    for round_index in range(2):
        calls = [
            ToolCall(
                f"functions.{'get_weather' if k == 0 else 'get_time'}:"
                f"{2 * round_index + k}"
                if reused_ids
                else f"call_{index}_{round_index}_{k}",
                "get_weather" if k == 0 else "get_time",
                json.dumps({"city": rng.choice(CITIES), "units": "metric"}),
            )
            for k in range(2)
        ]
        steps += calls
        steps += [
            ToolResult(
                call.call_id,
                json.dumps(
                    {"city": rng.choice(CITIES), "temp_c": rng.randint(-5, 35)}
                    | {"note": "clear skies " * rng.randint(1, 12)},
                    ensure_ascii=False,
                ),
            )
            for call in calls
        ]
    return TurnParts(
        question=f"{index}: weather in {rng.choice(CITIES)} and {rng.choice(CITIES)}?",
        attachments=(
            Attachment(
                media_type="image/jpeg",
                byte_size=245_000,
                uri=f"https://files.example/photo-{index}.jpg",
                width=1600,
                height=1200,
            ),
        ),
        steps=tuple(steps),  # type: ignore[arg-type]
        answer=f"It is {rng.randint(-5, 35)} °C; see the details above.",
    )


def text_twin(turn: TurnParts) -> tuple[str, str]:
    """The same texts as one question and one answer."""
    return turn.question, "\n".join([*turn.texts()[1:-1], turn.answer])


def build(ledger: Conversations, count: int) -> tuple[UUID, UUID, UUID]:
    """Text-only, tool-heavy and tool-heavy with reused ids: the same texts."""
    turns = [tool_turn(random.Random(index), index) for index in range(count)]
    reused = [tool_turn(random.Random(index), index, True) for index in range(count)]
    text_id = ledger.start_conversation(OWNER)
    tool_id = ledger.start_conversation(OWNER)
    reused_id = ledger.start_conversation(OWNER)
    for start in range(0, count, 1_000):
        chunk = range(start, min(start + 1_000, count))
        ledger.confirm_turns(
            OWNER, text_id, [(f"t{i}", *text_twin(turns[i])) for i in chunk]
        )
        ledger.confirm_turns(OWNER, tool_id, [(f"t{i}", turns[i]) for i in chunk])
        ledger.confirm_turns(OWNER, reused_id, [(f"t{i}", reused[i]) for i in chunk])
    return text_id, tool_id, reused_id


def timed_pair(
    first: Callable[[], object], second: Callable[[], object], repeat: int
) -> tuple[float, float, float]:
    """Median seconds of each, run alternately so load changes hit both alike,
    and the median of the ratios second / first of the runs made back to back
    (on a shared machine it moves less from run to run than the ratio of the
    medians, which is the figure)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for action, spent in zip((first, second), times, strict=True):
            started = time.perf_counter()
            action()
            spent.append(time.perf_counter() - started)
    paired = statistics.median(b / a for a, b in zip(*times, strict=True))
    return statistics.median(times[0]), statistics.median(times[1]), paired


def run(settings: Settings, count: int, repeat: int) -> bool:
    ledger = open_conversations(settings)
    ok = True
    try:
        text_id, tool_id, reused_id = build(ledger, count)
        print(f"{settings.persistence}, {count:,} turns each, 50-turn window")
        print(
            f"{'format':<20} {'ids':<7} {'text ms':>9} {'tools ms':>9} {'ratio':>7} "
            f"{'paired':>7} {'text bytes':>11} {'tools bytes':>11}"
        )
        policies = []
        for wire_format in WIRE_FORMATS:
            policy = WindowPolicy(
                wire_format=wire_format,  # type: ignore[arg-type]
                max_bytes=4_000_000,
                max_tokens=400_000,
                max_messages=None,
                max_pairs=50,
                floor_messages=10,
                max_message_tokens=1_000,
            )

            def project(conversation_id: UUID, policy: WindowPolicy = policy) -> bytes:
                return ledger.project_window(
                    OWNER,
                    conversation_id,
                    question=QUESTION,
                    system=SYSTEM,
                    model="m",
                    policy=policy,
                ).window.body

            policies.append(policy)
            for ids, tools_id in (("unique", tool_id), ("reused", reused_id)):
                assert len(project(tools_id)) > len(project(text_id)) // 2
                text_s, tool_s, paired = timed_pair(
                    lambda: project(text_id),
                    lambda tools_id=tools_id: project(tools_id),  # type: ignore[misc]
                    repeat,
                )
                ratio = tool_s / text_s
                ok = ok and ratio <= LIMIT
                print(
                    f"{wire_format:<20} {ids:<7} {text_s * 1e3:>9.2f} "
                    f"{tool_s * 1e3:>9.2f} {ratio:>6.2f}x {paired:>6.2f}x "
                    f"{len(project(text_id)):>11,} {len(project(tools_id)):>11,}"
                )
        ok = audit_receipts(ledger, [tool_id, reused_id], policies) and ok
    finally:
        ledger.close()
    return ok


def audit_receipts(
    ledger: Conversations, conversations: list[UUID], policies: list[WindowPolicy]
) -> bool:
    """Keep a window of each format as a turn's receipt, then audit: every
    receipt must be re-derived byte for byte."""
    started = time.perf_counter()
    for conversation_id in conversations:
        for index, policy in enumerate(policies):
            projected = ledger.project_window(
                OWNER,
                conversation_id,
                question=QUESTION,
                system=SYSTEM,
                model="m",
                policy=policy,
            )
            ledger.confirm_turn(
                OWNER,
                conversation_id,
                turn_id=f"receipt-{index}",
                question=QUESTION,
                answer="Noted.",
                window=projected,
            )
    report = Auditor(ledger).audit()
    verified = sum(
        report.conversation(conversation_id).receipts_verified
        for conversation_id in conversations
    )
    expected = len(conversations) * len(policies)
    print(
        f"audit: {verified} of {expected} tool-window receipts re-derived, "
        f"ok={report.ok} ({time.perf_counter() - started:.1f} s)"
    )
    return report.ok and verified == expected


def run_on_postgres(count: int, repeat: int) -> bool:
    """On the PostgreSQL named by TURNLEDGER_POSTGRES_*, in a schema of its own
    that is dropped afterwards."""
    import psycopg
    from psycopg import sql

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_schema=schema,
        master_key=new_master_key(),
    )
    try:
        return run(settings, count, repeat)
    finally:
        with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)
                )
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--sqlite", action="store_true", help="also on SQLite")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="also on the PostgreSQL named by TURNLEDGER_POSTGRES_*",
    )
    args = parser.parse_args()
    ok = run(Settings(_env_file=None, persistence="memory"), args.turns, args.repeat)
    if args.sqlite:
        with tempfile.TemporaryDirectory() as data_dir:
            settings = Settings(
                _env_file=None, persistence="sqlite", data_dir=Path(data_dir)
            )
            ok = run(settings, args.turns, args.repeat) and ok
    if args.postgres:
        ok = run_on_postgres(args.turns, args.repeat) and ok
    print(f"every ratio <= {LIMIT}x: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
