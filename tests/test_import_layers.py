"""No import circles between Podium's modules.

The graph is drawn from the source (``ast``), not from what an import happens to load:
every ``import`` counts, at module level, inside a function, or under ``TYPE_CHECKING``
(a type-only import still ties the two modules' designs together). An edge that must
stay against the layers is listed in :data:`ALLOWED` with the reason; the graph less those
edges has no cycle. See docs/architecture.md, "Layers".
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

#: (importer, imported): why this edge may point up a layer.
ALLOWED: dict[tuple[str, str], str] = {
    ("podium.agent", "podium.engine.driver"): (
        "Agent.run() is the one-line way to run an agent: it builds a throw-away Engine, "
        "imported when called (the engine imports the agent it runs)."
    ),
    ("podium.tools.agent_tool", "podium.engine.children"): (
        "calling an agent-as-a-tool starts a child run, which only the engine can do: "
        "imported when the tool is called."
    ),
    ("podium.handoffs", "podium.agent"): (
        "type-only: a Handoff names the Agent it leads to, and an Agent holds its hand-offs "
        "(a recursive data structure, not a dependency of code)."
    ),
    ("podium.tools.agent_tool", "podium.agent"): (
        "type-only: an AgentTool or HandoffTool holds the Agent it runs, and an Agent holds "
        "its tools (the same recursion as hand-offs)."
    ),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in (SRC / "podium").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
             known: dict[str, Path]) -> list[str]:
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")
            if not is_package:
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join([*base, *([node.module] if node.module else [])])
        else:
            prefix = node.module or ""
        # ``from pkg import mod`` imports the module; ``from mod import name``, the module.
        names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix
                 for a in node.names]
    out = []
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name.startswith("podium") and name != module:
            out.append(name)
    return out


def import_graph() -> dict[str, set[str]]:
    """Each module of ``src/podium`` and the modules of ``src/podium`` it imports."""
    known = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[module] = {
            target
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for target in _targets(node, module, path.name == "__init__.py", known)
        }
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_circles_beyond_the_allowed_edges() -> None:
    graph = import_graph()
    for importer, imported in ALLOWED:
        graph[importer].discard(imported)
    assert circles(graph) == []


def test_every_allowed_edge_still_exists() -> None:
    # An entry whose import went away is removed, so the list stays the list of exceptions.
    graph = import_graph()
    assert [edge for edge in ALLOWED if edge[1] not in graph.get(edge[0], set())] == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
