"""How far char/4 is from real tokenizers, by kind of text.

Prints, for each sample, the char/4 estimate, the real token counts under
o200k_base and cl100k_base (loaded offline), and estimate / real: below 1 the
estimate undercounts (the request is larger than budgeted).

    .venv/bin/python bench/tokens.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turnledger.infra.tokenizers import token_counter  # noqa: E402
from turnledger.projections.tokens import CHAR_ESTIMATE  # noqa: E402

SAMPLES = {
    "English prose": (
        "The migration of the orders table will run overnight. We copy the data "
        "to the new cluster, verify row counts and checksums, then switch reads "
        "before writes so that a rollback stays cheap. "
    ),
    "Python code": (
        "def migrate(batch: list[dict[str, int]]) -> list[int]:\n"
        "    return [row['id'] for row in batch if row.get('ok')]\n\n"
    ),
    "JSON log lines": (
        '{"level":"info","ts":"2026-11-30T09:00:00Z","msg":"copied","rows":1024}\n'
    ),
    "Chinese": (
        "订单表的迁移将在夜间进行。我们先把数据复制到新集群，"
        "核对行数和校验和，然后先切换读取再切换写入，这样回滚的代价很小。"
    ),
    "Japanese": (
        "注文テーブルの移行は夜間に実行します。データを新しいクラスタにコピーし、"
        "行数とチェックサムを確認してから、読み取りを先に切り替えます。"
    ),
    "Korean": (
        "주문 테이블 마이그레이션은 밤에 진행됩니다. 데이터를 새 클러스터로 "
        "복사하고 행 수와 체크섬을 확인한 다음 읽기를 먼저 전환합니다."
    ),
    "Russian": (
        "Миграция таблицы заказов пройдёт ночью. Мы копируем данные в новый "
        "кластер, сверяем количество строк и контрольные суммы."
    ),
    "Emoji-heavy chat": "ok 👍🏽 done 🎉🎉 see you 👋 — thanks!! 🙏🏼 ",
    "Mixed (EN + 中文 + code)": (
        "Run `make migrate` 然后检查日志 (check the logs): rows=1024, 状态=完成. "
    ),
}


def main() -> int:
    counters = [token_counter("o200k_base"), token_counter("cl100k_base")]
    header = f"{'text':<26}{'chars':>7}{'char/4':>8}"
    for counter in counters:
        header += f"{counter.name:>13}{'ratio':>7}"
    print(header)
    for label, sample in SAMPLES.items():
        text = sample * 20
        estimate = CHAR_ESTIMATE.count(text)
        line = f"{label:<26}{len(text):>7}{estimate:>8}"
        for counter in counters:
            real = counter.count(text)
            line += f"{real:>13}{estimate / real:>7.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
