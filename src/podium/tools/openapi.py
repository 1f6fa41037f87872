"""HTTP tools from an OpenAPI 3 document: one tool per operation.

::

    tools = openapi_tools(spec, operations=["getOrder", "createRefund"],
                          policy=EgressPolicy(allow_hosts={"api.example.com"}))

Path and query parameters and the fields of a JSON request body become the tool's
arguments (typed from their schemas, required as the document says); the operation's
summary is its description. Calls go through :func:`~podium.tools.http.http_tool`, so
the egress policy, the size and time caps and the error observations are the same.
Local ``$ref``\\ s (``#/components/...``) are followed; parameters in headers or cookies,
and bodies that are not JSON objects, are not supported (those operations are skipped
with the reason in :attr:`OpenAPITools.skipped`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from podium.errors import ToolDefinitionError
from podium.security.egress import EgressPolicy
from podium.tools.http import HttpClient, http_tool
from podium.tools.tool import Tool

__all__ = ("OpenAPITools", "openapi_tools")

_METHODS = ("get", "post", "put", "patch", "delete")
_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list[Any],
    "object": dict[str, Any],
}
_NAME = re.compile(r"[^A-Za-z0-9_-]")


class OpenAPITools(list[Tool[..., Any]]):
    """The tools made (a list), and ``skipped``: operation → why it was not made."""

    skipped: dict[str, str]


def _deref(spec: Mapping[str, Any], node: Any, depth: int = 0) -> Any:
    if isinstance(node, Mapping) and "$ref" in node and depth < 32:
        ref = str(node["$ref"])
        if not ref.startswith("#/"):
            raise ToolDefinitionError(f"only local $refs are supported: {ref}")
        target: Any = spec
        for part in ref[2:].split("/"):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return _deref(spec, target, depth + 1)
    return node


def _type(schema: Mapping[str, Any]) -> Any:
    return _TYPES.get(str(schema.get("type")), Any)


def openapi_tools(
    spec: Mapping[str, Any],
    *,
    base_url: str | None = None,
    operations: Iterable[str] | None = None,
    policy: EgressPolicy | None = None,
    client: HttpClient | None = None,
    timeout: float | None = None,
    retries: int = 0,
    max_result_tokens: int | None = None,
) -> OpenAPITools:
    """One tool per operation of ``spec`` (an OpenAPI 3 document as a mapping).

    ``operations`` picks operations by ``operationId``; ``base_url`` overrides the
    document's first server.
    """
    servers = spec.get("servers") or [{}]
    base = (base_url or str(servers[0].get("url", ""))).rstrip("/")
    if not base:
        raise ToolDefinitionError("the document names no server: pass base_url")
    wanted = None if operations is None else set(operations)
    made = OpenAPITools()
    made.skipped = {}
    for path, item in (spec.get("paths") or {}).items():
        item = _deref(spec, item)
        shared = [_deref(spec, p) for p in item.get("parameters", ())]
        for method in _METHODS:
            op = item.get(method)
            if op is None:
                continue
            op_id = str(op.get("operationId") or _NAME.sub("_", f"{method}_{path}").strip("_"))
            if wanted is not None and op_id not in wanted:
                continue
            try:
                made.append(
                    _operation(
                        spec,
                        base,
                        path,
                        method,
                        op,
                        shared,
                        op_id,
                        policy=policy,
                        client=client,
                        timeout=timeout,
                        retries=retries,
                        max_result_tokens=max_result_tokens,
                    )
                )
            except ToolDefinitionError as exc:
                made.skipped[op_id] = str(exc)
    if wanted is not None:
        missing = wanted - {t.name for t in made} - set(made.skipped)
        if missing:
            raise ToolDefinitionError(f"no such operations: {sorted(missing)}")
    return made


def _operation(
    spec: Mapping[str, Any],
    base: str,
    path: str,
    method: str,
    op: Mapping[str, Any],
    shared: list[Any],
    op_id: str,
    **options: Any,
) -> Tool[..., Any]:
    params: dict[tuple[str, str], Any] = {}
    for p in shared:
        params[(p.get("in"), p.get("name"))] = p
    for p in op.get("parameters", ()):
        p = _deref(spec, p)
        params[(p.get("in"), p.get("name"))] = p
    described: dict[str, str] = {}
    query: dict[str, str] = {}
    body: dict[str, str] = {}
    types: dict[str, Any] = {}
    required: list[str] = []
    schemas: dict[str, dict[str, Any]] = {}
    for (where, name), p in params.items():
        if where not in ("path", "query"):
            raise ToolDefinitionError(f"parameters in {where} are not supported ({name})")
        if not str(name).isidentifier():
            raise ToolDefinitionError(f"parameter {name!r} is not a usable argument name")
        schema = _deref(spec, p.get("schema") or {})
        types[name] = _type(schema)
        schemas[name] = {k: v for k, v in schema.items() if k != "title"}
        text = str(p.get("description") or "")
        if where == "path":
            described[name] = text
        else:
            query[name] = text
            if p.get("required"):
                required.append(name)
    request = _deref(spec, op.get("requestBody"))
    if request:
        content = request.get("content") or {}
        if "application/json" not in content:
            raise ToolDefinitionError("only JSON request bodies are supported")
        schema = _deref(spec, content["application/json"].get("schema") or {})
        if schema.get("type", "object") != "object":
            raise ToolDefinitionError("only JSON object request bodies are supported")
        for name, prop in (schema.get("properties") or {}).items():
            if not str(name).isidentifier() or name in types:
                raise ToolDefinitionError(f"body field {name!r} is not a usable argument name")
            prop = _deref(spec, prop)
            types[name] = _type(prop)
            schemas[name] = {k: v for k, v in prop.items() if k != "title"}
            body[name] = str(prop.get("description") or "")
        required.extend(str(n) for n in schema.get("required") or ())
    name = _NAME.sub("_", op_id)
    made = http_tool(
        name,
        base + path,
        method=method.upper(),
        description=str(op.get("summary") or op.get("description") or f"{method.upper()} {path}"),
        params=described,
        query=query,
        body=body,
        types=types,
        required=required,
        **options,
    )
    # The model reads the document's own schemas (enums, formats, limits) per argument.
    for pname, prop in made.parameters.get("properties", {}).items():
        extra = schemas.get(pname)
        if extra:
            merged = {**extra, **{k: v for k, v in prop.items() if k == "description"}}
            made.parameters["properties"][pname] = merged
    return made
