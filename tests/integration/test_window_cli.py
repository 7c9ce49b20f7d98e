"""`turnledger window` prints the window and its report, as a table or JSON."""

from __future__ import annotations

import json
from pathlib import Path
from uuid import UUID

import pytest

from turnledger.infra.cli import main
from turnledger.infra.persistence import open_conversations
from turnledger.infra.settings import Settings


@pytest.fixture
def stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> UUID:
    monkeypatch.setenv("TURNLEDGER_PERSISTENCE", "sqlite")
    monkeypatch.setenv("TURNLEDGER_DATA_DIR", str(tmp_path / "data"))
    ledger = open_conversations(Settings(_env_file=None))
    conversation_id = ledger.start_conversation("ann")
    for index in range(4):
        ledger.confirm_turn(
            "ann",
            conversation_id,
            turn_id=f"t{index}",
            question=f"Q{index} 你好" + (" lorem" * 1_500 if index == 2 else ""),
            answer=f'A{index} "ok"',
        )
    ledger.close()
    return conversation_id


@pytest.mark.parametrize(
    "fmt", ["openai-chat", "openai-responses", "anthropic-messages", "gemini-contents"]
)
def test_json_output_has_the_body_and_the_report(
    stored: UUID, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "window",
            str(stored),
            "--owner",
            "ann",
            "--question",
            "Now?",
            "--format",
            fmt,
            "--output",
            "json",
            "--max-bytes",
            "600",
        ]
    )
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    report = document["report"]
    assert report["wire_format"] == fmt
    assert report["body_bytes"] <= 600
    body = json.dumps(document["body"], ensure_ascii=False, separators=(",", ":"))
    assert len(body.encode()) == report["body_bytes"]
    assert report["kept_turn_ids"][-1] == "t3"
    dropped = {item["turn_id"]: item["reason"] for item in report["dropped"]}
    assert set(dropped) | set(report["kept_turn_ids"]) == {"t0", "t1", "t2", "t3"}
    assert set(dropped.values()) == {"bytes"}


def test_table_output_reports_trims_and_drops(
    stored: UUID, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "window",
            str(stored),
            "--owner",
            "ann",
            "--question",
            "Now?",
            "--tokenizer",
            "cl100k_base",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "cl100k_base" in out
    assert "question trimmed" in out and "tokens omitted" in out


def test_bad_input_exits_with_a_message(
    stored: UUID, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["window", "not-a-uuid", "--owner", "ann", "--question", "q"]) == 2
    assert "conversation_id" in capsys.readouterr().err
    assert main(["window", str(stored), "--owner", "bob", "--question", "q"]) == 2
    assert "not found" in capsys.readouterr().err
    code = main(
        [
            "window",
            str(stored),
            "--owner",
            "ann",
            "--question",
            "q" * 5_000,
            "--max-bytes",
            "300",
        ]
    )
    assert code == 2
    assert "over the 300-byte budget" in capsys.readouterr().err


def test_a_window_budget_under_twice_the_fold_threshold_refuses_to_start(
    stored: UUID, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TURNLEDGER_FOLD_THRESHOLD_TOKENS", "2001")
    code = main(["window", str(stored), "--owner", "ann", "--question", "q"])
    assert code == 2
    err = capsys.readouterr().err
    assert "invalid settings" in err and "2x the fold threshold (2001)" in err


@pytest.mark.parametrize("fmt", ["openai-chat", "anthropic-messages"])
def test_json_and_body_output_print_the_body_s_exact_bytes(
    stored: UUID, fmt: str, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """The bytes the window measured, not a re-serialization of them."""
    ledger = open_conversations(Settings(_env_file=None))
    expected = ledger.project_window(
        "ann",
        stored,
        question="Now? ü",
        system="",
        model="model",
        policy=Settings(_env_file=None)
        .window_policy()
        .model_copy(update={"wire_format": fmt, "max_bytes": 600}),
    ).window.body
    ledger.close()
    common = ["window", str(stored), "--owner", "ann", "--question", "Now? ü"]
    common += ["--format", fmt, "--max-bytes", "600", "--output"]
    assert main([*common, "body"]) == 0
    assert capsysbinary.readouterr().out == expected
    assert main([*common, "json"]) == 0
    out = capsysbinary.readouterr().out
    assert out.endswith(b'"body": ' + expected + b"\n}\n")
    document = json.loads(out)
    assert document["report"]["body_bytes"] == len(expected)
    assert document["body"] == json.loads(expected)
