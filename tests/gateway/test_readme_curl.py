"""The curl section (docs/gateway.md; once in the README) starts by setting the key, the
header and the URL. As written (`export K=pk_… H="Authorization: Bearer $K"`), bash
expanded `$K` before it set it: every request that followed was a 401. Its set-up lines
run here in bash, as written, against a real server, with the key and URL of this test."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from conftest import KEY_A, ServerProcess
from doc_samples import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("curl") is None, reason="curl")]


def _setup_lines() -> list[str]:
    page = (ROOT / "docs" / "gateway.md").read_text()
    block = page.split("## curl, endpoint by endpoint", 1)[1].split("```bash", 1)[1]
    lines = block.split("```", 1)[0].strip().splitlines()
    setup = [line for line in lines[: next(i for i, x in enumerate(lines) if "curl" in x)]]
    assert setup and all(re.match(r"(export )?[A-Z]+=", line) for line in setup), setup
    return setup


def test_the_curl_sections_setup_works_in_bash(server: ServerProcess) -> None:
    setup = [
        line.replace("pk_…", KEY_A).replace("http://127.0.0.1:8000", server.url)
        for line in _setup_lines()
    ]
    script = "\n".join([*setup, """curl -s -o /dev/null -w '%{http_code}' -H "$H" $U/v1/runs"""])
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert out.stdout == "200", (setup, out.stdout, out.stderr)
