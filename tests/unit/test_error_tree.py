"""The error tree documented at the top of domain/errors.py is the code's.

Every exception class turnledger defines is in it, under its real base; the
ones outside TurnLedgerError are listed apart, and the README names them.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

from turnledger.domain import errors
from turnledger.domain.errors import TurnLedgerError

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["turnledger.domain", "turnledger.projections", "turnledger.infra"]


def defined_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        modules = [package] + [
            importlib.import_module(info.name)
            for info in pkgutil.walk_packages(package.__path__, package_name + ".")
        ]
        for module in modules:
            for value in vars(module).values():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == module.__name__
                ):
                    found[value.__name__] = value
    return found


def documented_tree() -> tuple[dict[str, str | None], set[str]]:
    """(name -> documented parent) of the tree, and the names listed outside it."""
    doc = errors.__doc__ or ""
    tree, outside = doc.split("Outside the tree", 1)
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in tree.splitlines():
        match = re.match(r"^([\s│├└─]*)([A-Z]\w+Error)\b", line)
        if not match:
            continue
        depth = len(match.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parents[match.group(2)] = stack[-1][1] if stack else None
        stack.append((depth, match.group(2)))
    listed = set(re.findall(r"^\s+([A-Z]\w+Error) \(", outside, flags=re.M))
    return parents, listed


def test_the_tree_names_every_error_under_its_real_base() -> None:
    defined = defined_exceptions()
    parents, _ = documented_tree()
    in_tree = {
        name for name, cls in defined.items() if issubclass(cls, TurnLedgerError)
    }
    assert set(parents) == in_tree
    for name, parent in parents.items():
        if parent is not None:
            bases = [base.__name__ for base in defined[name].__bases__]
            assert parent in bases, f"{name} is documented under {parent}: {bases}"


def test_the_errors_outside_the_tree_are_listed_with_their_base() -> None:
    defined = defined_exceptions()
    _, listed = documented_tree()
    outside = {
        name for name, cls in defined.items() if not issubclass(cls, TurnLedgerError)
    }
    assert listed == outside
    doc = errors.__doc__ or ""
    for name in outside:
        base = defined[name].__bases__[0].__name__
        assert f"{name} ({base})" in doc


def test_the_readme_names_the_errors_outside_the_tree() -> None:
    section = (ROOT / "README.md").read_text().split("### Errors", 1)[1]
    section = section.split("\n## ", 1)[0]
    _, listed = documented_tree()
    for name in listed:
        assert f"`{name}`" in section, name
