"""Audit throughput beside the raw read rate of the notification log.

    .venv/bin/python bench/audit_throughput.py --conversations 1000 --turns 100

Builds a store of conversations x (turns + 1) events on PostgreSQL (a fresh
schema, dropped afterwards), plus a few conversations whose turns carry window
receipts, then times in the same run, alternating, `--repeat` times each:

- raw: reading every notification from the log in pages of 1,000 rows;
- chain: `Auditor.audit(receipts=False)`: versions and hash chains;
- full: `Auditor.audit()`: the same plus re-deriving every receipt.

Prints medians and the ratio audit/raw (target: at least 0.5).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from turnledger.infra.persistence import open_conversations  # noqa: E402
from turnledger.infra.service_layer.application import Conversations  # noqa: E402
from turnledger.infra.service_layer.audit import Auditor  # noqa: E402
from turnledger.infra.settings import Settings  # noqa: E402
from turnledger.infra.vault import new_master_key  # noqa: E402

PAGE = 1000


def bulk_conversations(ledger: Conversations, conversations: int, turns: int) -> None:
    """Conversations of `turns` turns each, through the public bulk import."""
    question, answer = "q" * 198, "a" * 598
    for index in range(conversations):
        owner = f"owner-{index % 50}"
        conversation_id = ledger.start_conversation(owner)
        ledger.confirm_turns(
            owner,
            conversation_id,
            [(f"t{turn}", question, answer) for turn in range(turns)],
        )


def conversations_with_receipts(ledger: Conversations, count: int, turns: int) -> int:
    receipts = 0
    for index in range(count):
        owner = f"receipt-owner-{index}"
        conversation_id = ledger.start_conversation(owner)
        for turn in range(turns):
            question = f"Question {turn} about item {index}?"
            window = ledger.project_window(
                owner,
                conversation_id,
                question=question,
                system="Be brief.",
                model="bench-model",
                max_bytes=1_500,
            )
            ledger.confirm_turn(
                owner,
                conversation_id,
                turn_id=f"t{turn}",
                question=question,
                answer="An answer of moderate length. " * 4,
                window=window,
            )
            receipts += 1
    return receipts


def raw_read(ledger: Conversations) -> int:
    count, start = 0, 0
    while True:
        page = ledger.recorder.select_notifications(
            start, PAGE, inclusive_of_start=False
        )
        if not page:
            return count
        count += len(page)
        start = page[-1].id


def timed(action: Callable[[], int]) -> tuple[float, int]:
    began = time.perf_counter()
    count = action()
    return time.perf_counter() - began, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--receipt-conversations", type=int, default=20)
    parser.add_argument("--receipt-turns", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    arguments = parser.parse_args()

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    settings = Settings(
        _env_file=None,
        persistence="postgres",
        postgres_schema=schema,
        master_key=new_master_key(),
    )
    ledger = open_conversations(settings)
    try:
        began = time.perf_counter()
        bulk_conversations(ledger, arguments.conversations, arguments.turns)
        receipts = conversations_with_receipts(
            ledger, arguments.receipt_conversations, arguments.receipt_turns
        )
        total = ledger.recorder.max_notification_id() or 0
        print(
            f"store: {total:,} events on PostgreSQL ({receipts} with receipts), "
            f"built in {time.perf_counter() - began:.1f} s"
        )

        def chain() -> int:
            report = Auditor(ledger, page_size=PAGE).audit(receipts=False)
            assert report.ok, report.failures[:3]
            return report.events_verified

        def full() -> int:
            report = Auditor(ledger, page_size=PAGE).audit()
            assert report.ok, report.failures[:3]
            verified = sum(a.receipts_verified for a in report.conversations)
            assert verified == receipts, (verified, receipts)
            return report.events_verified

        rates: dict[str, list[float]] = {"raw": [], "chain": [], "full": []}
        runs = {"raw": lambda: raw_read(ledger), "chain": chain, "full": full}
        for _ in range(arguments.repeat):
            for name, action in runs.items():
                seconds, count = timed(action)
                assert count == total, (name, count, total)
                rates[name].append(count / seconds)
        raw = statistics.median(rates["raw"])
        print(f"{'measure':<40}{'events/s':>10}{'ratio':>7}{'paired':>8}")
        label = "raw notification log read (page 1,000)"
        print(f"{label:<40}{raw:>10,.0f}{1:>7.2f}{1:>8.2f}")
        for name, label in (
            ("chain", "audit: versions + hash chains"),
            ("full", "audit: + re-derive every receipt"),
        ):
            rate = statistics.median(rates[name])
            # The ratio within each round, then the median: robust to load drift.
            paired = statistics.median(
                a / b for a, b in zip(rates[name], rates["raw"], strict=True)
            )
            print(f"{label:<40}{rate:>10,.0f}{rate / raw:>7.2f}{paired:>8.2f}")
        # What re-deriving the receipts added, from the paired timings.
        extra = statistics.median(
            total / full - total / chain
            for full, chain in zip(rates["full"], rates["chain"], strict=True)
        )
        if receipts and extra > 0:
            print(
                f"receipts: {receipts} re-derived in {extra * 1000:.0f} ms more "
                f"than the chain pass: {receipts / extra:,.0f} receipts/s"
            )
        print(
            f"medians of {arguments.repeat} rounds (raw, chain, full in turn); "
            "target ratio >= 0.50"
        )
    finally:
        ledger.close()
        with psycopg.connect(settings.postgres_conninfo(), autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(schema)
                )
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
