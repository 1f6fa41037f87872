"""An MCP server over stdio that misbehaves on purpose (raw JSON-RPC: the SDK would not).

    python hostile_server.py MODE [PIDFILE]

It answers ``initialize`` and ``tools/list`` (one tool, ``poke``) like a real server,
except as MODE says; ``tools/call`` is where most modes misbehave:

- ``no-init``: never answers ``initialize``.
- ``hang``: never answers a call.
- ``garbage``: writes non-JSON lines, a log line and a JSON value that is no message to
  stdout, then answers.
- ``huge``: writes a 10 MB line (no message at all) instead of an answer.
- ``endless``: writes bytes without a newline for ever.
- ``exit``: exits in the middle of the call.
- ``wrong-id``: answers with an id no request had, then never with the right one.
- ``flood``: sends 20,000 progress/log notifications, then answers.
- ``sampling``: asks the client for ``sampling/createMessage`` and answers with what
  it got back.
- ``bad-result``: answers with ``content`` that is not a list.
- ``odd-content``: answers with image, audio and resource content blocks.
- ``unknown-content``: answers with a content block of a type MCP does not have.
- ``many-tools``: ``tools/list`` has 2,000 tools, odd names, duplicates and a schema
  whose ``$ref`` points at itself.
- ``endless-list``: ``tools/list`` pages on for ever (500 tools a page, a new cursor
  each time).

With PIDFILE, its pid is written there when a ``tools/call`` arrives (the call is then
in flight: the lifecycle tests kill or stop around it).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MODE = sys.argv[1]
out = sys.stdout


def send(message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def result(rid: Any, value: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": value})


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


POKE = {"name": "poke", "description": "Poke the server.", "inputSchema": {"type": "object"}}


def tools() -> list[dict[str, Any]]:
    if MODE != "many-tools":
        return [POKE]
    listed: list[dict[str, Any]] = [
        {"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(2_000)
    ]
    recursive = {
        "type": "object",
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
        "properties": {"root": {"$ref": "#/$defs/node"}},
    }
    listed += [
        {"name": "poke", "inputSchema": recursive},
        {"name": "poke", "inputSchema": {"type": "object"}},  # a duplicate
        {"name": "a b/c;d", "inputSchema": {"type": "object"}},  # odd characters
        {"name": "a_b_c_d", "inputSchema": {"type": "object"}},  # the same once cleaned
    ]
    return listed


def on_call(rid: Any) -> None:
    if len(sys.argv) > 2:  # whole, or not there: the test reads it while we go on
        with open(sys.argv[2] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    if MODE == "hang":
        return
    if MODE == "garbage":
        out.write("this is not json\n{broken\n[1, 2, 3]\nINFO: a log line on stdout\n")
        out.flush()
    elif MODE == "huge":
        out.write("x" * 10_000_000 + "\n")
        out.flush()
        return
    elif MODE == "endless":
        chunk = "y" * 65536
        while True:
            out.write(chunk)
            out.flush()
    elif MODE == "exit":
        os._exit(5)
    elif MODE == "wrong-id":
        result(987654, text("for nobody"))
        return
    elif MODE == "flood":
        for i in range(20_000):
            send({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "data": f"line {i}"}})
    elif MODE == "sampling":
        send({"jsonrpc": "2.0", "id": "s1", "method": "sampling/createMessage",
              "params": {"messages": [], "maxTokens": 5}})
        answer = json.loads(sys.stdin.readline())
        result(rid, text(json.dumps(answer.get("error") or answer.get("result"))))
        return
    elif MODE == "bad-result":
        result(rid, {"content": "not a list", "isError": False})
        return
    elif MODE == "odd-content":
        result(rid, {"content": [
            {"type": "image", "data": "aGk=", "mimeType": "image/png"},
            {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "inside"}},
        ]})
        return
    elif MODE == "unknown-content":
        result(rid, {"content": [{"type": "text", "text": "a"}, {"type": "hologram"}]})
        return
    result(rid, text("poked"))


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if method == "initialize":
            if MODE == "no-init":
                continue
            result(rid, {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "0"},
            })
        elif method == "tools/list" and MODE == "endless-list":
            page = int((message.get("params") or {}).get("cursor") or 0)
            listed = [{"name": f"p{page}_{i}", "inputSchema": {"type": "object"}}
                      for i in range(500)]
            result(rid, {"tools": listed, "nextCursor": str(page + 1)})
        elif method == "tools/list":
            result(rid, {"tools": tools()})
        elif method == "tools/call":
            on_call(rid)
        elif rid is not None and method is not None:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})


if __name__ == "__main__":
    main()
