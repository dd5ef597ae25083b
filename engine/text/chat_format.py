"""Chat formatting: messages (+ tools, + thinking) -> prompt text, and model text -> answer parts.

ChatML (SmolLM2, Qwen2/3, SDAR, Fast-dLLM v2, Dream) is rendered here so that tools and thinking
markers are identical for every ChatML model; other checkpoints use their own Jinja template.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
ROLES = ("system", "user", "assistant", "tool")


class MessageError(ValueError):
    pass


def content_text(content) -> str:
    """OpenAI content: a string, None, or a list of {'type': 'text', 'text': ...} parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str):
                parts.append(p["text"])
            else:
                raise MessageError("only text content parts are supported")
        return "".join(parts)
    raise MessageError(f"message content must be a string or a list of text parts, not {type(content).__name__}")


def validate_messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise MessageError("messages must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise MessageError(f"messages[{i}] must be an object with 'role' and 'content'")
        role = m.get("role")
        if role not in ROLES:
            raise MessageError(f"messages[{i}].role must be one of {', '.join(ROLES)}; got {role!r}")
        content_text(m.get("content"))
        if role != "assistant" and m.get("content") is None:
            raise MessageError(f"messages[{i}] ({role}) needs content")
    return messages


def tool_call_text(call: dict) -> str:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return f"{CALL_OPEN}\n{json.dumps({'name': fn.get('name'), 'arguments': args})}\n{CALL_CLOSE}"


def compact_tool_line(tool: dict) -> str:
    """One line per tool: small models read this better than a JSON schema dump, and it is short."""
    fn = tool["function"]
    props = fn["parameters"].get("properties", {})
    req = set(fn["parameters"].get("required", []))
    args = []
    for k, v in props.items():
        typ = v.get("type", "string")
        if "enum" in v:
            typ = "|".join(map(str, v["enum"]))
        args.append(f"{k}{'' if k in req else '?'}: {typ}")
    return f"- {fn['name']}({', '.join(args)}): {fn.get('description', '')}".rstrip(": ")


def _without_extensions(x, names: bool = False):
    """A JSON schema without its "x-" keys (`names`: x is a "properties" map, whose keys are names)."""
    if isinstance(x, dict):
        return {k: _without_extensions(v, names=k == "properties" and not names) for k, v in x.items()
                if names or not (isinstance(k, str) and k.startswith("x-"))}
    if isinstance(x, list):
        return [_without_extensions(v) for v in x]
    return x


@dataclass
class ChatFormat:
    tool_style: str = "json"  # "json" (Hermes/Qwen) or "compact" (the default small model)
    jinja_template: str | None = None  # non-ChatML checkpoints
    stop_texts: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
    extra: dict = field(default_factory=dict)
    # The checkpoint's special tokens as its template sees them (tokenizer_config.json), e.g.
    # LLaDA's template starts the prompt with `bos_token` (<|startoftext|>).
    special_tokens: dict = field(default_factory=dict)

    def tools_block(self, tools: list[dict]) -> str:
        if not tools:
            return ""
        if self.tool_style == "compact":
            lines = "\n".join(compact_tool_line(t) for t in tools)
            return (
                "\n\nTools you can call:\n" + lines + "\nTo call one, reply with "
                + CALL_OPEN + '\n{"name": "...", "arguments": {...}}\n' + CALL_CLOSE
            )
        body = "\n".join(json.dumps(t) for t in tools)
        return (
            "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            + body + "\n</tools>\n\nFor each function call, return a json object with function name and "
            "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )

    def render(self, messages: list[dict], tools: list[dict] | None = None, thinking: bool = False,
               prefix: str = "") -> str:
        """The prompt text, ending with the assistant header (and `<think>` when thinking)."""
        # Engine-only schema keys ("x-grounded": engine/text/grounding.py) are not shown to the model.
        tools = [_without_extensions(t) for t in tools or []]
        if self.jinja_template:
            return self._render_jinja(messages, tools, thinking) + prefix
        out = []
        msgs = list(messages)
        if tools and msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": ""})
        for i, m in enumerate(msgs):
            role, text = m["role"], content_text(m.get("content"))
            if role == "system" and i == 0:
                text = (text + self.tools_block(tools)).strip()
            elif role == "assistant":
                text = self.assistant_text(m)
            elif role == "tool":
                text = f"<tool_response>\n{text}\n</tool_response>"
            out.append(f"<|im_start|>{role}\n{text}<|im_end|>\n")
        out.append("<|im_start|>assistant\n")
        if thinking:
            out.append(THINK_OPEN + "\n")
        return "".join(out) + prefix

    @staticmethod
    def assistant_text(m: dict) -> str:
        parts = []
        reasoning = m.get("reasoning_content") or m.get("reasoning")
        if reasoning:
            parts.append(f"{THINK_OPEN}\n{reasoning.strip()}\n{THINK_CLOSE}\n\n")
        parts.append(content_text(m.get("content")))
        for call in m.get("tool_calls") or []:
            parts.append(("\n" if parts[-1] else "") + tool_call_text(call))
        return "".join(parts)

    def _render_jinja(self, messages, tools, thinking) -> str:
        """Render the checkpoint's own template as transformers' apply_chat_template does (same
        Jinja environment and filters, the tokenizer's special tokens). `enable_thinking` is set
        only when thinking is asked for, so a template's default is kept otherwise."""
        tpl = _compile_template(self.jinja_template)
        msgs = []
        for m in messages:
            m = dict(m)
            m["content"] = content_text(m.get("content"))
            msgs.append(m)
        kw = dict(self.special_tokens)
        if thinking:
            kw["enable_thinking"] = True
        return tpl.render(messages=msgs, tools=tools or None, documents=None, add_generation_prompt=True, **kw)


_TEMPLATES: dict[str, object] = {}


def _compile_template(source: str):
    """The Jinja environment of transformers' chat templates (trim_blocks, lstrip_blocks,
    loopcontrols, a sandbox, tojson without ASCII escapes, raise_exception, strftime_now)."""
    if source in _TEMPLATES:
        return _TEMPLATES[source]
    from datetime import datetime

    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    tpl = env.from_string(source)
    _TEMPLATES[source] = tpl
    return tpl


_BROKEN_THINK_CLOSE = re.compile(r"</think(?=[^>])")
_BROKEN_THINK_CLOSE_END = re.compile(r"</think$")


class OutputParser:
    """Splits streamed model text into reasoning, answer and tool-call text, holding back
    partial tags so that a tag cut by a block boundary never leaks into the answer."""

    TAGS = (THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE)

    def __init__(self, in_reasoning: bool = False, one_call: bool = False) -> None:
        """`one_call`: the output is one call and nothing after it (tool_choice named a function):
        text after the call's close is dropped, never spoken."""
        self.mode = "reasoning" if in_reasoning else "answer"
        self.buf = ""
        self.reasoning, self.answer, self.tool_text = "", "", ""
        self.one_call = one_call

    def feed(self, text: str, final: bool = False) -> list[tuple[str, str]]:
        self.buf += text
        events: list[tuple[str, str]] = []
        while self.buf:
            if self.mode == "reasoning":
                # Second line of defence after block_rewrite: a closer that lost its ">" ("</think\n",
                # or "</think" as the last text) still ends the reasoning, so the answer is not lost.
                self.buf = _BROKEN_THINK_CLOSE_END.sub(THINK_CLOSE, self.buf) if final else self.buf
                self.buf = _BROKEN_THINK_CLOSE.sub(THINK_CLOSE, self.buf, count=1)
            idx, tag = min(((self.buf.find(t), t) for t in self.TAGS if t in self.buf), default=(-1, ""))
            if idx < 0:
                hold = 0 if final else self._partial_tag_len(self.buf)
                chunk, self.buf = self.buf[: len(self.buf) - hold], self.buf[len(self.buf) - hold :]
                self._emit(chunk, events)
                break
            self._emit(self.buf[:idx], events)
            self.buf = self.buf[idx + len(tag) :]
            if tag == THINK_OPEN:
                self.mode = "reasoning"
            elif tag == THINK_CLOSE:
                self.mode = "answer"
                self.buf = self.buf.lstrip("\n")
            elif tag == CALL_OPEN:
                if self.mode != "tool":  # said once per call: the caller can be told to hold on now
                    events.append(("tool_call", ""))
                self.mode = "tool"
                self.tool_text += CALL_OPEN
            elif tag == CALL_CLOSE:
                self.tool_text += CALL_CLOSE
                self.mode = "after" if self.one_call else "answer"
        return events

    def _partial_tag_len(self, s: str) -> int:
        best = 0
        for t in self.TAGS:
            for k in range(1, len(t)):
                if s.endswith(t[:k]):
                    best = max(best, k)
        return best

    def _emit(self, chunk: str, events: list) -> None:
        if not chunk:
            return
        if self.mode == "reasoning":
            self.reasoning += chunk
            events.append(("reasoning", chunk))
        elif self.mode == "tool":
            self.tool_text += chunk
        elif self.mode == "answer":
            if not self.answer:
                chunk = chunk.lstrip()
                if not chunk:
                    return
            self.answer += chunk
            events.append(("answer", chunk))
