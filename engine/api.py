"""Engine: load(), session(), chat(), stream(). The public surface the voice side and server use."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from engine.block_rewrite import rewrite_finished_block
from engine.chat_format import ChatFormat, MessageError, OutputParser, validate_messages
from engine.decode import BlockDecoder, DecodeParams, SeqState
from engine.effort import EFFORTS, get_effort
from engine.families import FAMILIES, Family
from engine.kv_cache import KVCache
from engine.loading import (
    LoadedCheckpoint,
    family_from_config,
    load_hf_folder,
    read_special_tokens,
    smollm2_folder,
)
from engine.precision import resolve_precision
from engine.reference import ReferenceDecoder
from engine.tool_guide import ToolCallGuide
from engine.tools import ToolSchemaError, parse_tool_calls, validate_tools

DEFAULT_ADAPTER = Path(__file__).parent / "weights" / "default_adapter.safetensors"
MAX_TOKENS_LIMIT = 4096


class EngineInputError(ValueError):
    """Bad input from the caller (messages, tools, effort, sizes). The message says what to fix."""


@dataclass
class StreamEvent:
    type: str  # "reasoning" | "answer" | "done"
    text: str = ""
    t_ms: float = 0.0  # since the request started
    result: ChatResult | None = None


@dataclass
class ChatResult:
    text: str
    reasoning: str
    tool_calls: list[dict]
    tool_errors: list[str]
    finish_reason: str
    metrics: dict
    model: str
    raw_text: str = ""

    def message(self) -> dict:
        """The assistant message in OpenAI shape (with `reasoning_content`)."""
        m: dict = {"role": "assistant", "content": self.text or (None if self.tool_calls else "")}
        if self.reasoning:
            m["reasoning_content"] = self.reasoning
        if self.tool_calls:
            m["tool_calls"] = self.tool_calls
        return m


@dataclass
class Session:
    """One call's cached state: its KV cache and the tokens and messages that are in it."""

    cache: KVCache
    tokens: list[int] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def merged(self, messages: list[dict]) -> list[dict]:
        """`messages`, with the turns this session produced restored verbatim (reasoning kept),
        so the rendered history matches the cached tokens."""
        out = list(messages)
        for i, (old, new) in enumerate(zip(self.history, messages, strict=False)):
            if old.get("role") != new.get("role"):
                break
            if old["role"] == "assistant" and _same_assistant_turn(old, new):
                out[i] = old
            elif old != new:
                break
        return out

    def reset(self) -> None:
        self.cache.lengths.zero_()
        self.tokens, self.history = [], []


def _same_assistant_turn(a: dict, b: dict) -> bool:
    ac, bc = (a.get("content") or "").strip(), (b.get("content") or "").strip()
    an = [c["function"]["name"] for c in a.get("tool_calls") or []]
    bn = [c.get("function", {}).get("name") for c in b.get("tool_calls") or []]
    return ac == bc and an == bn


class Engine:
    def __init__(self, ckpt: LoadedCheckpoint, model_name: str, family: Family, mask_id: int,
                 chat_format: ChatFormat, max_context: int, info: dict | None = None) -> None:
        self.model = ckpt.model
        self.tokenizer = ckpt.tokenizer
        self.family = family
        self.model_name = model_name
        self.mask_id = mask_id
        self.chat_format = chat_format
        self.max_context = max_context
        self.info = info or {}
        self.decoder = BlockDecoder(self.model, family, mask_id)
        self.eos_ids = self._eos_ids()
        self.supports_thinking = family.name in ("smollm2-dllm", "sdar", "ar") and not chat_format.jinja_template
        # "engine": our block decoder (efforts, guards, streaming); "reference": the family's own
        # sampler, token for token (engine/reference.py).
        self.decoding = "engine"
        self.reference: ReferenceDecoder | None = None
        # Tool calls keep to the tools' schemas and mangled control tags are repaired
        # (engine/block_rewrite.py, engine/tool_guide.py); False: the model's text is left as it is.
        self.guided_tools = True
        self._lock = threading.Lock()

    # -- loading -------------------------------------------------------------------------
    @classmethod
    def load(cls, name_or_path: str | Path = "default", dtype: torch.dtype | None = None,
             threads: int | None = None, family: str | None = None, block_size: int | None = None,
             adapter: str | Path | None = None, max_context: int = 4096,
             precision: str | None = None, decoding: str = "engine") -> Engine:
        """Load "default" (the embedded dLLM), "smollm2-base" (the AR base), or a local HF folder.

        `decoding="reference"` decodes a dLLM checkpoint (sdar, fast_dllm_v2, llada, dream) with
        its family's reference sampler at its documented greedy settings, exactly
        (engine/reference.py); the default "engine" is our block decoder with efforts and guards.

        `precision` ("fp32" | "bf16" | "int8" | "auto", or a torch `dtype`) defaults to $VOICE_AGENT_PRECISION,
        then auto (engine/precision.py)."""
        if decoding not in ("engine", "reference"):
            raise ValueError(f"decoding must be 'engine' or 'reference'; got {decoding!r}")
        if threads:
            torch.set_num_threads(threads)
        prec = resolve_precision(dtype if dtype is not None else precision)
        dtype = prec.dtype
        info: dict = {"dtype": str(dtype).replace("torch.", ""), "precision": prec.name,
                      "precision_reason": prec.reason}
        if str(name_or_path) in ("default", "smollm2-base"):
            ckpt = load_hf_folder(smollm2_folder(), dtype=dtype)
            base_family = FAMILIES["smollm2-dllm"]
            adapter_path = Path(adapter) if adapter else DEFAULT_ADAPTER
            if str(name_or_path) == "smollm2-base":
                fam, name = FAMILIES["ar"], "smollm2-135m-instruct (AR base)"
            elif adapter_path.exists():
                from engine.adapter import merge_adapter

                meta = merge_adapter(ckpt.model, adapter_path)
                info["adapter"] = meta
                fam = _with_block(base_family, int(meta.get("block_size", base_family.block_size)))
                name = meta.get("model_name", "smollm2-135m-dllm")
            else:
                fam = base_family
                name = "smollm2-135m-instruct-untrained-blockmode (no adapter: base weights in block mode)"
            fmt = ChatFormat(tool_style="compact")
        else:
            path = Path(name_or_path)
            if not path.is_dir():
                raise FileNotFoundError(f"model {name_or_path!r} is neither 'default' nor a local folder")
            ckpt = load_hf_folder(path, dtype=dtype)
            fam = family_from_config(FAMILIES[family], ckpt.config, path, ckpt.tokenizer) if family else ckpt.family
            name = path.name
            if fam.chat_template == "checkpoint" and ckpt.chat_template:
                # dLLM checkpoints: their own template, as their reference renders it.
                fmt = ChatFormat(tool_style="json", jinja_template=ckpt.chat_template,
                                 special_tokens=read_special_tokens(path))
            else:
                chatml = ckpt.chat_template is None or "<|im_start|>" in (ckpt.chat_template or "")
                fmt = ChatFormat(tool_style="json", jinja_template=None if chatml else ckpt.chat_template)
            if adapter:
                from engine.adapter import merge_adapter

                info["adapter"] = merge_adapter(ckpt.model, Path(adapter))
        if prec.int8_weights:  # after the adapter merge: the merged weights are what is quantised
            from engine.quant import quantize_int8

            info["int8_linears"] = quantize_int8(ckpt.model, dtype)
        if block_size:
            fam = _with_block(fam, block_size)
        mask_id = _mask_id(ckpt, fam)
        max_ctx = min(max_context, ckpt.model.cfg.max_seq_len)
        eng = cls(ckpt, name, fam, mask_id, fmt, max_ctx, info)
        if decoding == "reference":
            eng.decoding = "reference"
            eng.reference = ReferenceDecoder(eng.model, fam.name, mask_id, _reference_stop_ids(ckpt) or eng.eos_ids,
                                             block_size=block_size)
            eng.supports_thinking = False  # the references render the template without thinking
            eng.guided_tools = False
        return eng

    def _eos_ids(self) -> set[int]:
        ids = set()
        for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eos|>"):
            i = self.tokenizer.token_to_id(t)
            if i is not None:
                ids.add(i)
        return ids

    def variant(self, family: str | None = None, block_size: int | None = None) -> Engine:
        """The same weights decoded another way (e.g. family="ar": the same-weights AR baseline)."""
        from dataclasses import replace

        fam = FAMILIES[family] if family else self.family
        if block_size:
            fam = replace(fam, block_size=int(block_size))
        other = Engine.__new__(Engine)
        other.__dict__.update(self.__dict__)
        other.family = fam
        other.decoder = BlockDecoder(self.model, fam, self.mask_id)
        other._lock = threading.Lock()
        other.model_name = self.model_name + (f" [{fam.name}, block {fam.block_size}]" if fam != self.family else "")
        return other

    # -- sessions ------------------------------------------------------------------------
    def new_cache(self, batch: int = 1, capacity: int = 512) -> KVCache:
        cfg = self.model.cfg
        return KVCache(cfg.n_layers, batch, cfg.n_kv_heads, cfg.head_dim, capacity, self.model.dtype,
                       max_capacity=self.max_context + 64)

    def session(self) -> Session:
        """A call handle: its turns reuse the KV cache of the turns before."""
        return Session(cache=self.new_cache())

    # -- requests ------------------------------------------------------------------------
    def prepare(self, messages, tools=None, tool_choice=None, reasoning_effort: str = "low",
                max_tokens: int = 256, session: Session | None = None, stop=None,
                temperature: float = 0.0, seed: int | None = None, block_size: int | None = None,
                threshold: float | None = None, guided_tools: bool | None = None) -> Request:
        """Check a request and turn it into tokens and decoding parameters (no model work)."""
        try:
            validate_messages(messages)
            tools = validate_tools(tools)
            preset = get_effort(reasoning_effort)
        except (MessageError, ToolSchemaError, ValueError) as e:
            raise EngineInputError(str(e)) from None
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
            raise EngineInputError(f"max_tokens must be an integer in 1..{MAX_TOKENS_LIMIT}; got {max_tokens!r}")
        if not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
            raise EngineInputError(f"temperature must be in 0..2; got {temperature!r}")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
            raise EngineInputError("stop must be a non-empty string or a list of at most 4 of them")
        prefix = ""
        if tool_choice not in (None, "auto", "none", "required") and not (
            isinstance(tool_choice, dict) and isinstance(tool_choice.get("function", {}).get("name"), str)
        ):
            raise EngineInputError("tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}")
        if tool_choice == "none":
            tools = []
        elif tool_choice == "required":
            if not tools:
                raise EngineInputError("tool_choice 'required' needs tools")
            prefix = "<tool_call>\n"
        elif isinstance(tool_choice, dict):
            fname = tool_choice["function"]["name"]
            if fname not in [t["function"]["name"] for t in tools]:
                raise EngineInputError(f"tool_choice names an unknown function {fname!r}")
            prefix = '<tool_call>\n{"name": "' + fname + '", "arguments": '
        thinking = preset.thinking_budget > 0 and self.supports_thinking and self.family.thinking and not prefix
        msgs = session.merged(messages) if session is not None else list(messages)
        text = self.chat_format.render(msgs, tools, thinking=thinking, prefix=prefix)
        tokens = self.tokenizer.encode(text, add_special_tokens=False).ids
        if len(tokens) + max_tokens > self.max_context:
            raise EngineInputError(
                f"context too long: {len(tokens)} prompt tokens + max_tokens {max_tokens} exceeds "
                f"the limit of {self.max_context}"
            )
        b = block_size or self.family.block_size
        params = DecodeParams(
            block_size=b,
            threshold=preset.threshold if threshold is None else threshold,
            max_steps_per_block=preset.max_steps(b),
            max_tokens=max_tokens,
            temperature=float(temperature),
            seed=seed,
        )
        req = Request(self, msgs, tools, tokens, params, preset.thinking_budget if thinking else 0,
                      thinking, prefix, stops, session, reasoning_effort)
        req.guided = self.guided_tools if guided_tools is None else guided_tools
        if tools and req.guided and prefix:  # the prompt already opened the call: guide it from the first block
            named = tool_choice["function"]["name"] if isinstance(tool_choice, dict) else None
            req.guide = ToolCallGuide(tools, forced_name=named, opened=named is None)
        return req

    def warm(self, session: Session, messages, tools=None, reasoning_effort: str = "low") -> int:
        """Prefill a call's fixed prefix (system prompt + tools) into its session before the caller
        speaks, e.g. while the greeting plays, so the first turn prefills only the caller's words.
        Returns how many tokens the session cache now holds."""
        req = self.prepare(messages, tools=tools, reasoning_effort=reasoning_effort, max_tokens=1, session=session)
        sys_msgs = [m for m in messages if m.get("role") == "system"][:1]
        prefix = self.chat_format.render(sys_msgs, validate_tools(tools), thinking=False) if sys_msgs else ""
        # Only the system part is stable across turns; the rest will be rendered with the turn.
        n = len(self.tokenizer.encode(prefix, add_special_tokens=False).ids) if prefix else 0
        n = max(1, min(n - 3, len(req.tokens) - 1))  # stop before the generation header
        with session.lock:
            req.tokens = req.tokens[:n]
            req.prefill(session.cache)
            session.tokens = req.tokens[: int(session.cache.lengths[0])]
        return len(session.tokens)

    def stream(self, messages, **kw) -> Iterator[StreamEvent]:
        """Yield reasoning/answer text as blocks are committed, then a "done" event with the result."""
        req = self.prepare(messages, **kw)
        session = req.session
        lock = session.lock if session is not None else self._lock
        if not lock.acquire(timeout=60):
            raise RuntimeError("this session is busy with another turn")
        try:
            yield from req.run_alone()
        finally:
            lock.release()

    def chat(self, messages, **kw) -> ChatResult:
        for ev in self.stream(messages, **kw):
            if ev.type == "done":
                return ev.result
        raise RuntimeError("stream ended without a result")

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


class Request:
    """One chat turn in flight: its prompt, its decode state, and the text it produced so far.
    The scheduler drives many of these in one batch; `run_alone` drives one."""

    def __init__(self, engine: Engine, messages, tools, tokens, params, thinking_budget, thinking,
                 prefix, stops, session, effort) -> None:
        self.engine, self.messages, self.tools, self.tokens = engine, messages, tools, tokens
        self.params, self.thinking_budget, self.thinking = params, thinking_budget, thinking
        self.prefix, self.stops, self.session, self.effort = prefix, stops, session, effort
        self.parser = OutputParser(in_reasoning=thinking)
        if prefix:  # a forced tool call: the prompt already opened <tool_call>, so the output is its body
            self.parser.mode = "tool"
        self.state: SeqState | None = None
        self.t0 = time.perf_counter()
        self.t_prefill_end = 0.0
        self.prefill_ms = 0.0
        self.cached_tokens = 0
        self.text = ""
        self.ttft_ms: float | None = None
        self.ttfat_ms: float | None = None
        self.reasoning_closed = not thinking
        self.stopped_by_string = False
        # Repair mangled control tags and keep tool calls in their schemas (engine/block_rewrite.py).
        self.guided = engine.guided_tools
        self.guide: ToolCallGuide | None = None

    def _ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    # -- prefill -----------------------------------------------------------------------------
    def prefill(self, cache: KVCache, row_cache: KVCache | None = None) -> None:
        """Prefill only what the cache does not already hold; `row_cache` is this request's row."""
        eng = self.engine
        rc = row_cache or cache
        have = self.session.tokens if self.session is not None else []
        n = int(rc.lengths[0])
        have = have[:n]
        k = 0
        for a, b in zip(have, self.tokens, strict=False):
            if a != b:
                break
            k += 1
        # At least one token to prefill, for the next-token logits; families with aligned blocks
        # leave the prompt's leftover (past the last multiple of B) to the first block.
        k, end = eng.decoder.split_prompt(len(self.tokens), k)
        rc.crop(k)
        self.cached_tokens = k
        t = time.perf_counter()
        next_logits = eng.decoder.prefill(rc, self.tokens[k:end]) if end > k else None
        self.t_prefill_end = time.perf_counter()
        self.prefill_ms = (self.t_prefill_end - t) * 1000
        self.state = eng.decoder.start(self.params, next_logits, row=0, eos_ids=eng.eos_ids,
                                       carry=self.tokens[end:], prompt_len=len(self.tokens))

    # -- after each step -------------------------------------------------------------------
    def absorb(self) -> list[StreamEvent]:
        """Turn newly final tokens into events; apply stop strings and the thinking budget."""
        st = self.state
        if not st.new_final:
            return []
        if self.guided:
            rewrite_finished_block(self)
        if self.ttft_ms is None:
            self.ttft_ms = self._ms()
        tok = self.engine.tokenizer
        full = tok.decode(st.generated, skip_special_tokens=True)
        delta, self.text = full[len(self.text):], full
        final = st.done
        for s in self.stops:
            cut = self.text.find(s)
            if cut >= 0:
                delta = delta[: max(0, len(delta) - (len(self.text) - cut))]
                self.text = self.text[:cut]
                st.done, st.finish_reason, final = True, "stop", True
                self.stopped_by_string = True
        events = [StreamEvent(kind, text, self._ms()) for kind, text in self.parser.feed(delta, final=final)]
        if not self.reasoning_closed and self.parser.mode != "reasoning":
            self.reasoning_closed = True
        if self.ttfat_ms is None and any(e.type == "answer" for e in events):
            self.ttfat_ms = events[0].t_ms
        if (not self.reasoning_closed and not st.done and st.steps_in_block == 0
                and len(st.generated) >= self.thinking_budget):
            # The thinking budget is spent: close the thought and make the model answer.
            st.forced = tok.encode("\n</think>\n\n", add_special_tokens=False).ids
            self.engine.decoder._new_block(st)
            self.reasoning_closed = True
        return events

    def run_reference(self, cache: KVCache) -> Iterator[StreamEvent]:
        """Decode with the family's reference sampler (Engine.decoding == "reference"): the whole
        reply at once, from scratch (the reference keeps no cache between calls, so neither
        does the session)."""
        eng = self.engine
        cache.crop(0)
        self.t_prefill_end = time.perf_counter()
        out = eng.reference.generate(self.tokens, self.params.max_tokens)
        st = SeqState(params=self.params, row=0, next_logits=None, eos_ids=frozenset(eng.reference.stop_ids))
        toks = out.tokens
        cut = next((i for i, t in enumerate(toks) if t in st.eos_ids), None)
        st.generated = toks[: cut + 1] if cut is not None else toks[: self.params.max_tokens]
        st.new_final = list(st.generated)
        st.forward_passes = out.forward_passes
        st.done, st.finish_reason = True, ("stop" if cut is not None else "length")
        self.state = st
        yield from self.absorb()
        result = self.finish(cache)
        yield StreamEvent("done", "", self._ms(), result)

    def run_alone(self) -> Iterator[StreamEvent]:
        eng = self.engine
        cache = self.session.cache if self.session is not None else eng.new_cache()
        if eng.decoding == "reference":
            yield from self.run_reference(cache)
            return
        finished = False
        try:
            self.prefill(cache)
            while not self.state.done:
                eng.decoder.step(cache, [self.state])
                yield from self.absorb()
            yield from self.absorb()
            result = self.finish(cache)
            finished = True
            yield StreamEvent("done", "", self._ms(), result)
        finally:
            if not finished:
                self.abandon(cache)

    def abandon(self, row_cache: KVCache) -> None:
        """A turn stopped early (barge-in, disconnect, error): record what the cache really holds,
        so the call's next turn reuses the prompt and re-prefills only what differs."""
        if self.session is None:
            return
        generated = self.state.generated if self.state is not None else []
        n = int(row_cache.lengths[0])
        self.session.tokens = (self.tokens + generated)[:n]
        self.session.history = list(self.messages)

    def finish(self, row_cache: KVCache) -> ChatResult:
        """Build the result and record the turn in the session (the cache already holds it)."""
        st = self.state
        tail = self.parser.feed("", final=True)
        for kind, _ in tail:
            if kind == "answer" and self.ttfat_ms is None:
                self.ttfat_ms = self._ms()
        parsed = parse_tool_calls(self.prefix + self.parser.tool_text, self.tools) if (
            self.tools and (self.parser.tool_text or self.prefix)) else None
        answer = self.parser.answer.strip()
        reasoning = self.parser.reasoning.strip()
        t_end = time.perf_counter()
        decode_s = max(t_end - self.t_prefill_end, 1e-9)
        n = len(st.generated)
        tool_calls = parsed.calls if parsed else []
        finish = "tool_calls" if tool_calls else ("stop" if st.finish_reason == "stop" else st.finish_reason or "stop")
        metrics = {
            "ttft_ms": round(self.ttft_ms, 2) if self.ttft_ms is not None else None,
            "ttfat_ms": round(self.ttfat_ms, 2) if self.ttfat_ms is not None else None,
            "prefill_ms": round(self.prefill_ms, 2),
            "decode_ms": round(decode_s * 1000, 2),
            "total_ms": round(self._ms(), 2),
            "decode_tok_s": round(n / decode_s, 2),
            # Only what the model decoded: infilled text (the tool-call skeleton) came for free.
            "tokens_per_forward": round((n - st.infilled) / max(st.forward_passes, 1), 3),
            "infilled_tokens": st.infilled,
            "forward_passes": st.forward_passes,
            "completion_tokens": n,
            "reasoning_tokens": self.engine.count_tokens(reasoning) if reasoning else 0,
            "prompt_tokens": len(self.tokens),
            "cached_tokens": self.cached_tokens,
            "block_size": self.params.block_size,
            "threshold": self.params.threshold,
            "reasoning_effort": self.effort,
            "model": self.engine.model_name,
        }
        result = ChatResult(
            text=answer,
            reasoning=reasoning,
            tool_calls=tool_calls,
            tool_errors=parsed.errors if parsed else [],
            finish_reason=finish,
            metrics=metrics,
            model=self.engine.model_name,
            raw_text=self.text,
        )
        if self.session is not None:
            s = self.session
            s.tokens = (self.tokens + st.generated)[: int(row_cache.lengths[0])]
            s.history = list(self.messages) + [result.message()]
        return result


def _with_block(fam: Family, b: int) -> Family:
    from dataclasses import replace

    return replace(fam, block_size=int(b))


def _reference_stop_ids(ckpt: LoadedCheckpoint) -> set[int]:
    """The stop tokens the references use: generation_config.json's eos_token_id, else config.json's."""
    import json

    gen = ckpt.folder / "generation_config.json"
    for src in ((json.loads(gen.read_text()) if gen.exists() else {}), ckpt.config):
        eos = src.get("eos_token_id")
        if isinstance(eos, int):
            return {eos}
        if isinstance(eos, list) and eos:
            return {int(e) for e in eos}
    return set()


def _mask_id(ckpt: LoadedCheckpoint, fam: Family) -> int:
    if fam.mask_token_id is not None:
        return fam.mask_token_id
    if fam.mask_token:
        i = ckpt.tokenizer.token_to_id(fam.mask_token)
        if i is not None:
            return i
    if fam.attention == "causal":
        return 0  # AR never feeds a mask
    raise ValueError(f"the tokenizer has no mask token {fam.mask_token!r} for family {fam.name}")


__all__ = ["Engine", "Session", "ChatResult", "StreamEvent", "EngineInputError", "EFFORTS", "Request"]
