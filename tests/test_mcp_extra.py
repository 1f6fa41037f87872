"""``mcp`` is an extra (``podium[mcp]``): the base install runs without the MCP SDK (and
the pydantic, HTTP client and cryptography it brings), and each MCP feature asked for
without it is one line naming the extra.

The base install is played in a fresh interpreter whose import system refuses the SDK and
what only it brings, as an environment without them would."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from doc_samples import ROOT

pytestmark = pytest.mark.slow

# What `pip install .` does not install once mcp is an extra.
WITHOUT_MCP = """
import sys

_ABSENT = {"mcp", "pydantic", "pydantic_core", "httpx2", "httpcore2", "cryptography", "jwt",
           "sse_starlette"}


class _BaseInstall:  # every finder, blind to what the base install lacks
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _ABSENT:
            return None
        find = getattr(self.finder, "find_spec", None)
        return find(name, path, target) if find else None

    def __getattr__(self, name):
        return getattr(self.finder, name)


sys.meta_path[:] = [_BaseInstall(f) for f in sys.meta_path]
"""

EXTRA = "needs the 'mcp' extra (no module named '"
INSTALL = "pip install 'podium[mcp]'"


def one_line_naming_the_extra(text: str) -> bool:
    return EXTRA in text and INSTALL in text and len(text.strip().splitlines()) == 1


def python(code: str, cwd: Path, *, without_mcp: bool = True) -> subprocess.CompletedProcess[str]:
    prelude = WITHOUT_MCP if without_mcp else ""
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        cwd=cwd, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )


def test_the_base_install_imports_and_loads_no_mcp(tmp_path: Path) -> None:
    code = """
        import podium, podium.cli.main, podium.factory, podium.gateway.app, podium.tools
        print(sorted(m for m in sys.modules if m.partition(".")[0] in ("mcp", "pydantic")))
    """
    for without in (True, False):  # and with the SDK installed, importing it is not paid
        out = python("import sys\n" + textwrap.dedent(code), tmp_path, without_mcp=without)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize(
    "code",
    [
        "from podium.tools import MCPServer",
        "import podium.tools.mcp",
        "from podium.tools.mcp_serve import agents_mcp_server",
        "import podium.gateway.mcp_endpoint",
    ],
)
def test_an_mcp_feature_without_the_extra_is_one_line_naming_it(
    code: str, tmp_path: Path
) -> None:
    out = python(f"""
        from podium.errors import MissingExtraError
        try:
            {code}
        except MissingExtraError as exc:
            print(exc)
        else:
            print("imported")
    """, tmp_path)
    assert out.returncode == 0, out.stderr
    assert one_line_naming_the_extra(out.stdout), out.stdout


def test_python_m_mcp_serve_says_it_in_one_line(tmp_path: Path) -> None:
    out = python("""
        import runpy
        runpy.run_module("podium.tools.mcp_serve", run_name="__main__")
    """, tmp_path)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr, out.stderr
    assert one_line_naming_the_extra(out.stderr), out.stderr


def test_mcp_servers_in_podium_toml_are_one_line_from_the_cli(tmp_path: Path) -> None:
    (tmp_path / "podium.toml").write_text(textwrap.dedent(f"""
        [[models]]
        name = "sim"
        model = "podium-sim"
        base_url = "http://127.0.0.1:9/v1"

        [[mcp_servers]]
        name = "docs"
        command = {sys.executable!r}

        [[agents]]
        name = "helper"
        model = "sim"
        mcp = ["docs"]
    """))
    out = python("""
        from podium.cli.main import main
        sys.exit(main(["run", "helper", "hi"]))
    """, tmp_path)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    assert one_line_naming_the_extra(out.stderr), out.stderr


def test_the_gateway_serves_without_mcp_and_its_endpoint_names_the_extra(
    tmp_path: Path,
) -> None:
    out = python("""
        import asyncio
        import httpx
        from podium.config import load_config
        from podium.examples.react import agent
        from podium.gateway.app import create_app
        from podium.gateway.runtime import build_gateway
        from podium.gateway.service import ServedAgent
        from podium.store.memory import MemoryRunStore

        async def main():
            config = load_config(None, {"PODIUM_KEYS": "pk_t=t",
                                        "PODIUM_LIMITS__ADAPTIVE__ENABLED": "false"})
            gw = build_gateway(config, [ServedAgent(agent)], store=MemoryRunStore())
            await gw.start()
            try:
                transport = httpx.ASGITransport(app=create_app(gw, manage_lifecycle=False))
                async with httpx.AsyncClient(transport=transport, base_url="http://t",
                                             headers={"Authorization": "Bearer pk_t"}) as c:
                    run = await c.post("/v1/runs", json={"agent": agent.name,
                                                         "input": "hi", "wait": True})
                    mcp = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1,
                                                     "method": "tools/list"})
                print(run.status_code, run.json()["status"])
                print(mcp.status_code, mcp.json()["error"]["message"])
            finally:
                await gw.stop()

        asyncio.run(main())
    """, tmp_path)
    assert out.returncode == 0, out.stderr
    ran, mcp = out.stdout.strip().splitlines()
    assert ran == "200 completed", out.stdout
    assert mcp.startswith("501 ") and EXTRA in mcp and INSTALL in mcp, out.stdout
