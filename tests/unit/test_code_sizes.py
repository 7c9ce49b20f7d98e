"""Rooms a newcomer can read: no module over 400 lines and no function over
60 without a stated reason (docs/architecture.md, "Sizes").

A reason is a comment line starting `# Long because:` right at the long
thing: on the line above a function's `def` (above its decorators, if it
has any), or in a module's first five lines.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "projections", "infra")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
REASON = "# Long because:"
# A reason says why in words, not a placeholder: at least this many of them.
MIN_REASON_WORDS = 3


@dataclass(frozen=True)
class Offender:
    path: Path
    line: int
    what: str
    lines: int
    limit: int

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT) if ROOT in self.path.parents else self.path
        return (
            f"{where}:{self.line}: {self.what} is {self.lines} lines (> {self.limit})"
        )


def _has_reason(line: str) -> bool:
    text = line.strip()
    return text.startswith(REASON) and (
        len(text[len(REASON) :].split()) >= MIN_REASON_WORDS
    )


def offenders_in(path: Path) -> list[Offender]:
    """The module and the functions of `path` over their limits, unexplained."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found: list[Offender] = []
    if len(lines) > MAX_MODULE_LINES and not any(
        _has_reason(line) for line in lines[:5]
    ):
        found.append(Offender(path, 1, "module", len(lines), MAX_MODULE_LINES))
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        if length <= MAX_FUNCTION_LINES:
            continue
        # The line above the first decorator, or above the `def` (1-based
        # line numbers: the line above line n is lines[n - 2]).
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        above = lines[first - 2] if first >= 2 else ""
        if not _has_reason(above):
            found.append(
                Offender(
                    path,
                    node.lineno,
                    f"function {node.name}",
                    length,
                    MAX_FUNCTION_LINES,
                )
            )
    return found


def modules() -> list[Path]:
    return sorted(
        path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    )


def test_modules_and_functions_are_short_or_say_why() -> None:
    assert modules(), "no module found under domain/, projections/, infra/"
    offenders = [str(o) for path in modules() for o in offenders_in(path)]
    if offenders:
        pytest.fail(
            "too long, with no '# Long because: <reason>' at it "
            "(split it into named steps, or say why it must stay long):\n  "
            + "\n  ".join(offenders),
            pytrace=False,
        )


def test_a_long_function_without_a_reason_is_named_with_its_line(
    tmp_path: Path,
) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    module = tmp_path / "long.py"
    module.write_text(f"import os\n\n\ndef long():\n{body}")
    (offender,) = offenders_in(module)
    assert (offender.path, offender.line, offender.what) == (module, 4, "function long")
    assert offender.lines == 61


def test_a_stated_reason_right_above_the_def_is_accepted(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    reason = "# Long because: one table of sixty rules read top to bottom\n"
    module = tmp_path / "long.py"
    module.write_text(f"import os\n\n\n{reason}@staticmethod\ndef long():\n{body}")
    assert offenders_in(module) == []
    # A reason elsewhere, or one with no words, is not a reason.
    module.write_text(f"{reason}\n\n\ndef long():\n{body}")
    assert len(offenders_in(module)) == 1
    module.write_text(f"# Long because:\ndef long():\n{body}")
    assert len(offenders_in(module)) == 1


def test_a_long_module_needs_its_reason_in_its_first_lines(tmp_path: Path) -> None:
    module = tmp_path / "big.py"
    lines = "".join(f"x{i} = {i}\n" for i in range(401))
    module.write_text(lines)
    assert [str(o).split(": ", 1)[1] for o in offenders_in(module)] == [
        "module is 401 lines (> 400)"
    ]
    reason = "# Long because: the generated table of every code point\n"
    module.write_text('"""Doc."""\n' + reason + lines[: -len("x400 = 400\n")])
    assert offenders_in(module) == []
