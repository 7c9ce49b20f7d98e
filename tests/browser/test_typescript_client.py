"""The TypeScript client's own tests (Node's built-in runner, clients/typescript/
test/) against a real `turnledger serve` on SQLite and on PostgreSQL, and the
committed JavaScript of the web page checked against a fresh build of the
TypeScript sources."""

from __future__ import annotations

import filecmp
import os
import subprocess
from pathlib import Path

from tests.browser.conftest import ROOT, TS_ROOT, Service

WEB_JS = ROOT / "infra" / "http" / "web" / "js"


def test_typescript_client_against_the_service(service: Service, node: str) -> None:
    env = {
        **os.environ,
        "TL_URL": service.url,
        "TL_TOKEN_A": service.tokens["a"],
        "TL_TOKEN_B": service.tokens["b"],
        "TL_TOKEN_OTHER": service.tokens["other"],
    }
    done = subprocess.run(
        [node, "--test", "--test-reporter=spec", "test/"],
        cwd=TS_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# fail 0" in done.stdout or "fail 0" in done.stdout, done.stdout


def test_committed_javascript_is_the_build_of_the_sources(
    node: str, tmp_path: Path
) -> None:
    """infra/http/web/js is committed so the package needs no node; it must be
    exactly what `npm run build:web` makes of clients/typescript."""
    out = tmp_path / "js"
    done = subprocess.run(
        [
            node,
            str(TS_ROOT / "node_modules" / "typescript" / "bin" / "tsc"),
            "-p",
            "tsconfig.web.json",
            "--outDir",
            str(out),
        ],
        cwd=TS_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    built = sorted(p.relative_to(out) for p in out.rglob("*.js"))
    committed = sorted(p.relative_to(WEB_JS) for p in WEB_JS.rglob("*.js"))
    assert built == committed
    _, mismatch, errors = filecmp.cmpfiles(
        out, WEB_JS, [str(p) for p in built], shallow=False
    )
    assert not mismatch and not errors, (
        f"stale: {mismatch + errors}; run scripts/ts-types"
    )
