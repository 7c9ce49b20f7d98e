"""The README's Python synopsis runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README has no python block"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})  # noqa: S102 - our own docs


def test_readme_starts_with_the_two_commands() -> None:
    text = README.read_text()
    first_block = re.search(r"```\n(.*?)```", text, flags=re.DOTALL)
    assert first_block is not None
    demo = "python3 -m venv .venv && .venv/bin/pip install -e . && "
    assert first_block.group(1).splitlines() == [
        demo + ".venv/bin/turnledger demo",
        "scripts/test",
    ]
