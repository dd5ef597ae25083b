"""OpenAI tool schemas in, OpenAI tool_calls out: schema checks and tool-call parsing."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

import jsonschema

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


class ToolSchemaError(ValueError):
    pass


def validate_tools(tools: list | None) -> list[dict]:
    """Check OpenAI-style `tools`; return them normalised. Raises ToolSchemaError with a clear message."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ToolSchemaError("tools must be a list of {'type': 'function', 'function': {...}} objects")
    out = []
    names = set()
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(t.get("function"), dict):
            raise ToolSchemaError(f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}")
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ToolSchemaError(f"tools[{i}].function.name must be 1-64 letters, digits, '_', '.' or '-'")
        if name in names:
            raise ToolSchemaError(f"tools[{i}]: duplicate function name {name!r}")
        names.add(name)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ToolSchemaError(f"tools[{i}].function.parameters must be a JSON schema object")
        try:
            jsonschema.Draft202012Validator.check_schema(params)
        except jsonschema.SchemaError as e:
            raise ToolSchemaError(f"tools[{i}].function.parameters is not a valid JSON schema: {e.message}") from None
        if params.get("type", "object") != "object":
            raise ToolSchemaError(f"tools[{i}].function.parameters must describe an object")
        out.append({"type": "function", "function": {"name": name, "description": fn.get("description", ""), "parameters": params}})
    return out


def check_arguments(tool: dict, arguments: dict) -> str | None:
    """None when `arguments` fit the tool's schema, else a message the model or caller can act on."""
    try:
        jsonschema.validate(arguments, tool["function"]["parameters"])
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "arguments"
        return f"invalid arguments for {tool['function']['name']}: {where}: {e.message}"
    return None


@dataclass
class ParsedToolCalls:
    calls: list[dict]  # OpenAI-shaped
    errors: list[str]


def parse_tool_calls(text: str, tools: list[dict]) -> ParsedToolCalls:
    """Parse every <tool_call>{json}</tool_call> in `text`. Bad ones become errors, never exceptions."""
    by_name = {t["function"]["name"]: t for t in tools}
    calls, errors = [], []
    for m in TOOL_CALL_RE.finditer(text):
        body = m.group(1).strip()
        try:
            # The first complete JSON object is the call; a mangled closing tag after it
            # ("...}}\ntool_call>") does not make a valid call invalid.
            obj, _ = json.JSONDecoder().raw_decode(body)
        except json.JSONDecodeError as e:
            errors.append(f"tool call is not valid JSON ({e.msg}): {body[:120]!r}")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            errors.append(f"tool call needs a 'name': {body[:120]!r}")
            continue
        name, args = obj["name"], obj.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                errors.append(f"arguments of {name} are not a JSON object")
                continue
        if name not in by_name:
            errors.append(f"unknown tool {name!r}; known: {', '.join(by_name) or 'none'}")
            continue
        if not isinstance(args, dict):
            errors.append(f"arguments of {name} must be a JSON object")
            continue
        err = check_arguments(by_name[name], args)
        if err:
            errors.append(err)
            continue
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        )
    return ParsedToolCalls(calls, errors)
