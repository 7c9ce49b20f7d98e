"""Lists in the docs that must match the code: routes, audit findings."""

from __future__ import annotations

import re
from pathlib import Path

from turnledger.domain import findings
from turnledger.infra.http.app import create_app
from turnledger.infra.settings import Settings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _normalized(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path.split("?", 1)[0])


def test_the_endpoint_table_of_docs_sync_lists_every_route() -> None:
    text = (DOCS / "sync.md").read_text()
    table = text.split("## Endpoints (v1)", 1)[1].split("\n## ", 1)[0]
    documented = set()
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        for methods, path in re.findall(
            r"`([A-Z/]+) (/v1/[^` ]*)`", line.split("|")[1]
        ):
            documented.update((m, _normalized(path)) for m in methods.split("/"))
    app = create_app(Settings(_env_file=None, persistence="memory"))
    served = {
        (method.upper(), _normalized(path))
        for path, item in app.openapi()["paths"].items()
        for method in item
    }
    assert served - documented == set(), "routes missing from docs/sync.md"
    assert documented - served == set(), "documented routes that do not exist"


def test_docs_audit_names_every_kind_of_finding() -> None:
    text = (DOCS / "audit.md").read_text()
    kinds = {
        value
        for name, value in vars(findings).items()
        if name.isupper() and isinstance(value, str) and re.fullmatch(r"[a-z-]+", value)
    }
    assert kinds, "no finding kinds found"
    assert {kind for kind in kinds if f"`{kind}`" not in text} == set()


# A file of the repository named in backticks: `infra/vault.py`, `tests/...`.
_REPO_PATH = re.compile(
    r"`((?:domain|projections|infra|tests|bench|scripts|clients|docs)/[\w./-]+)`"
)


def test_every_file_the_docs_name_exists() -> None:
    """Modules move (docs/architecture.md): a doc must not send a reader to a
    file that is gone."""
    root = DOCS.parent
    missing = [
        f"{doc.relative_to(root)}: {match.group(1)}"
        for doc in [root / "README.md", *sorted(DOCS.glob("*.md"))]
        for match in _REPO_PATH.finditer(doc.read_text())
        if not (root / match.group(1).rstrip("/")).exists()
    ]
    assert missing == []
