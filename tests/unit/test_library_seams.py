"""Library internals are used in one module only (infra/library_compat.py).

Reads the source: a call of a library's private method through `super()`, a
private name of eventsourcing's or uvicorn's classes, or an attribute set on
an object with `object.__setattr__` in the code that handles events, fails
here with the file and line, so an upgrade still has one place to look.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import eventsourcing
import uvicorn

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "projections", "infra")
COMPAT = ROOT / "infra" / "library_compat.py"
# Where events and aggregates are built, mapped and stored.
EVENT_CODE = ("domain/conversation.py", "infra/service_layer", "infra/postgres")


def _sources() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != COMPAT
    ]


def _library_private_names() -> set[str]:
    """Private attributes and methods the libraries define on their objects."""
    names: set[str] = set()
    for library in (eventsourcing, uvicorn):
        for path in Path(library.__file__).parent.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            names.update(re.findall(r"self\.(_[a-z][a-z0-9_]*)\b", text))
            names.update(re.findall(r"def (_[a-z][a-z0-9_]*)\(self", text))
    return names


def _own_names(tree: ast.AST) -> set[str]:
    """Private names a module defines itself (assigned on self, or methods)."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
    return own


def test_no_library_private_name_outside_the_compat_module() -> None:
    library_private = _library_private_names()
    assert "_insert_events" in library_private  # the scan sees the libraries
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        own = _own_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") or node.attr not in library_private:
                continue
            through_super = (
                isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "super"
            )
            if through_super or node.attr not in own:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert found == []


def test_no_attribute_is_set_on_a_frozen_object_where_events_are_handled() -> None:
    found = []
    for path in _sources():
        relative = path.relative_to(ROOT).as_posix()
        if not relative.startswith(EVENT_CODE):
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if "object.__setattr__" in line:
                found.append(f"{relative}:{number}")
    assert found == []
