"""Engine: load(), session(), chat(), stream(). The public surface the voice side and server use."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import torch

from engine import errors
from engine.config import DEFAULT_MAX_CONTEXT, DEFAULT_MAX_TOKENS
from engine.errors import EngineInputError, SessionBusy
from engine.model.families import FAMILIES, Family
from engine.model.kv_cache import KVCache
from engine.model.loading import (
    LoadedCheckpoint,
    family_from_config,
    load_hf_folder,
    read_special_tokens,
    smollm2_folder,
)
from engine.model.precision import resolve_precision
from engine.model.reference import ReferenceDecoder
from engine.runtime.decode import DecodeLoop
from engine.runtime.drafts import NgramDrafts
from engine.runtime.effort import EFFORTS, get_effort
from engine.runtime.results import ChatResult, StreamEvent
from engine.runtime.runner import ModelRunner
from engine.runtime.sampler import ORDERS
from engine.runtime.sequence import DecodeParams
from engine.runtime.session import Session
from engine.text.chat_format import ChatFormat, MessageError, validate_messages
from engine.text.request import Request
from engine.text.tool_calls import ToolSchemaError, validate_tools
from engine.text.tool_guide import ToolCallGuide

DEFAULT_ADAPTER = Path(__file__).parent / "weights" / "default_adapter.safetensors"
MAX_TOKENS_LIMIT = 4096


class Engine:
    """Load, then decode: `chat`/`stream` run the decode loop (engine/runtime/decode.py) over a call's own
    cache; the server submits `prepare`d requests to the scheduler, which runs the same loop batched."""

    def __init__(self, ckpt: LoadedCheckpoint, model_name: str, family: Family, mask_id: int,
                 chat_format: ChatFormat, max_context: int, info: dict | None = None,
                 runner: ModelRunner | None = None) -> None:
        self.runner = runner or ModelRunner(ckpt.model)
        self.model = self.runner.model
        self.tokenizer = ckpt.tokenizer
        self.family = family
        self.model_name = model_name
        self.mask_id = mask_id
        self.chat_format = chat_format
        self.max_context = max_context
        self.info = info or {}
        self.eos_ids = self._eos_ids()
        self.supports_thinking = family.name in ("smollm2-dllm", "sdar", "ar") and not chat_format.jinja_template
        # "engine": our block decoder (efforts, guards, streaming); "reference": the family's own
        # sampler, token for token (engine/model/reference.py).
        self.decoding = "engine"
        self.reference: ReferenceDecoder | None = None
        # Tool calls keep to the tools' schemas and mangled control tags are repaired
        # (engine/text/block_rewrite.py, engine/text/tool_guide.py); False: the model's text is left as it is.
        self.guided_tools = True
        # Answer text streams as soon as a block's left part is committed, not when the block is
        # complete (engine/text/request.py); False: a block streams whole (what `engine.tools.bench` compares).
        self.stream_committed_prefix = True
        # What followed each short token run in the prompts and replies decoded so far: drafts for
        # the "verify" order (engine/runtime/drafts.py), shared by every call on these weights.
        self.drafts = NgramDrafts()
        self._lock = threading.Lock()

    # -- loading -------------------------------------------------------------------------
    @classmethod
    def load(cls, name_or_path: str | Path = "default", dtype: torch.dtype | None = None,
             threads: int | None = None, family: str | None = None, block_size: int | None = None,
             adapter: str | Path | None = None, max_context: int = DEFAULT_MAX_CONTEXT,
             precision: str | None = None, decoding: str = "engine",
             device: str | torch.device | None = None) -> Engine:
        """Load "default" (the embedded dLLM), "smollm2-base" (the AR base), or a local HF folder.

        `decoding="reference"` decodes a dLLM checkpoint (sdar, fast_dllm_v2, llada, dream) with
        its family's reference sampler at its documented greedy settings, exactly
        (engine/model/reference.py); the default "engine" is our block decoder with efforts and guards.

        `precision` ("fp32" | "bf16" | "int8" | "w8a8" | "auto", or a torch `dtype`) defaults to $VOICE_AGENT_PRECISION,
        then auto (engine/model/precision.py). `device` (default: the CPU) is where the weights, the KV
        caches and every tensor of a pass live (engine/runtime/runner.py)."""
        if decoding not in ("engine", "reference"):
            raise ValueError(f"decoding must be 'engine' or 'reference'; got {decoding!r}")
        if threads:
            torch.set_num_threads(threads)
        prec = resolve_precision(dtype if dtype is not None else precision,
                                 int8_checked=str(name_or_path) == "default" and adapter is None)
        dtype = prec.dtype
        info: dict = {"dtype": str(dtype).replace("torch.", ""), "precision": prec.name,
                      "precision_reason": prec.reason}
        if str(name_or_path) in ("default", "smollm2-base"):
            ckpt = load_hf_folder(smollm2_folder(), dtype=dtype)
            base_family = FAMILIES["smollm2-dllm"]
            adapter_path = Path(adapter) if adapter else DEFAULT_ADAPTER
            if adapter and not adapter_path.is_file():  # a named adapter never falls back silently
                raise FileNotFoundError(f"adapter {adapter_path} not found")
            if str(name_or_path) == "smollm2-base":
                fam, name = FAMILIES["ar"], "smollm2-135m-instruct (AR base)"
            elif adapter_path.exists():
                from engine.model.adapter import merge_adapter

                meta = merge_adapter(ckpt.model, adapter_path)
                info["adapter"] = meta
                info["adapter_path"] = str(adapter_path)  # the shipped one, a pack's own or --adapter
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
                from engine.model.adapter import merge_adapter

                info["adapter"] = merge_adapter(ckpt.model, Path(adapter))
        # After the adapter merge: the merged weights are what is quantised (int8) and placed.
        runner = ModelRunner(ckpt.model, prec, device)
        info.update(runner.info)
        if block_size:
            fam = _with_block(fam, block_size)
        mask_id = _mask_id(ckpt, fam)
        max_ctx = min(max_context, ckpt.model.cfg.max_seq_len)
        eng = cls(ckpt, name, fam, mask_id, fmt, max_ctx, info, runner)
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
        other._lock = threading.Lock()
        other.model_name = self.model_name + (f" [{fam.name}, block {fam.block_size}]" if fam != self.family else "")
        return other

    # -- sessions ------------------------------------------------------------------------
    def new_cache(self, batch: int = 1, capacity: int = 512) -> KVCache:
        return self.runner.new_cache(batch, capacity, max_capacity=self.max_context + 64)

    def session(self) -> Session:
        """A call handle: its turns reuse the KV cache of the turns before."""
        return Session(cache=self.new_cache())

    # -- requests ------------------------------------------------------------------------
    def prepare(self, messages, tools=None, tool_choice=None, reasoning_effort: str = "low",
                max_tokens: int = DEFAULT_MAX_TOKENS, session: Session | None = None, stop=None,
                temperature: float = 0.0, seed: int | None = None, block_size: int | None = None,
                threshold: float | None = None, guided_tools: bool | None = None,
                call_progress: bool = False, order: str | None = None) -> Request:
        """Check a request and turn it into tokens and decoding parameters (no model work).
        `call_progress`: stream "tool_args" events, the call's text so far each time it grows.
        `threshold`, `order` (engine/runtime/sampler.py ORDERS), `block_size`: instead of the effort's."""
        try:
            validate_messages(messages)
        except MessageError as e:
            raise EngineInputError(str(e), errors.INVALID_MESSAGES, "messages") from None
        try:
            tools = validate_tools(tools)
        except ToolSchemaError as e:
            raise EngineInputError(str(e), errors.INVALID_TOOLS, "tools") from None
        try:
            preset = get_effort(reasoning_effort)
        except ValueError as e:
            raise EngineInputError(str(e), errors.INVALID_REASONING_EFFORT, "reasoning_effort") from None
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= MAX_TOKENS_LIMIT:
            raise EngineInputError(f"max_tokens must be an integer in 1..{MAX_TOKENS_LIMIT}; got {max_tokens!r}",
                                   errors.INVALID_MAX_TOKENS, "max_tokens")
        if not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
            raise EngineInputError(f"temperature must be in 0..2; got {temperature!r}",
                                   errors.INVALID_TEMPERATURE, "temperature")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
            raise EngineInputError("stop must be a non-empty string or a list of at most 4 of them",
                                   errors.INVALID_STOP, "stop")
        if order is not None and order not in ORDERS:
            raise EngineInputError(f"order must be one of {', '.join(ORDERS)}; got {order!r}",
                                   errors.INVALID_ORDER, "order")
        prefix = ""
        if tool_choice not in (None, "auto", "none", "required") and not (
            isinstance(tool_choice, dict) and isinstance(tool_choice.get("function", {}).get("name"), str)
        ):
            raise EngineInputError("tool_choice must be 'auto', 'none', 'required' or {'type': 'function', 'function': {'name': ...}}",
                                   errors.INVALID_TOOL_CHOICE, "tool_choice")
        if tool_choice == "none":
            tools = []
        elif tool_choice == "required":
            if not tools:
                raise EngineInputError("tool_choice 'required' needs tools", errors.INVALID_TOOL_CHOICE, "tool_choice")
            prefix = "<tool_call>\n"
        elif isinstance(tool_choice, dict):
            fname = tool_choice["function"]["name"]
            if fname not in [t["function"]["name"] for t in tools]:
                raise EngineInputError(f"tool_choice names an unknown function {fname!r}",
                                       errors.INVALID_TOOL_CHOICE, "tool_choice")
            prefix = '<tool_call>\n{"name": "' + fname + '", "arguments": '
        guide = None
        guided = self.guided_tools if guided_tools is None else guided_tools
        if tools and guided and prefix:  # the prompt opens the call: guide it from the first pass
            named = tool_choice["function"]["name"] if isinstance(tool_choice, dict) else None
            guide = ToolCallGuide(tools, forced_name=named, opened=named is None)
            prefix += guide.take_opening()
        thinking = preset.thinking_budget > 0 and self.supports_thinking and self.family.thinking and not prefix
        msgs = session.merged(messages) if session is not None else list(messages)
        text = self.chat_format.render(msgs, tools, thinking=thinking, prefix=prefix)
        tokens = self.tokenizer.encode(text, add_special_tokens=False).ids
        if len(tokens) + max_tokens > self.max_context:
            raise EngineInputError(
                f"context too long: {len(tokens)} prompt tokens + max_tokens {max_tokens} exceeds "
                f"the limit of {self.max_context}", errors.CONTEXT_LENGTH_EXCEEDED, "messages")
        b = block_size or self.family.block_size
        params = DecodeParams(
            block_size=b,
            threshold=preset.threshold if threshold is None else threshold,
            max_steps_per_block=preset.max_steps(b),
            max_tokens=max_tokens,
            temperature=float(temperature),
            seed=seed,
            order=preset.order if order is None else order,
        )
        req = Request(self, msgs, tools, tokens, params, preset.thinking_budget if thinking else 0,
                      thinking, prefix, stops, session, reasoning_effort, guided=guided, guide=guide)
        req.call_progress = bool(call_progress)
        return req

    def warm_request(self, session: Session, messages, tools=None, reasoning_effort: str = "low") -> Request:
        """The prefill of a call's fixed prefix (system prompt + tools), cut where the turns' own
        text begins: only the system part is stable across turns."""
        req = self.prepare(messages, tools=tools, reasoning_effort=reasoning_effort, max_tokens=1, session=session)
        sys_msgs = [m for m in messages if m.get("role") == "system"][:1]
        prefix = self.chat_format.render(sys_msgs, validate_tools(tools), thinking=False) if sys_msgs else ""
        n = len(self.tokenizer.encode(prefix, add_special_tokens=False).ids) if prefix else 0
        req.tokens = req.tokens[: max(1, min(n - 3, len(req.tokens) - 1))]  # stop before the generation header
        return req

    def guess_request(self, session: Session, messages, tools=None, reasoning_effort: str = "low") -> Request:
        """The prefill of a turn not yet decided: its prompt but for the last token (which the turn
        itself prefills, for the logits that start its answer)."""
        req = self.prepare(messages, tools=tools, reasoning_effort=reasoning_effort, max_tokens=1, session=session)
        req.tokens = req.tokens[:-1]
        return req

    def warm(self, session: Session, messages, tools=None, reasoning_effort: str = "low") -> int:
        """Prefill a call's fixed prefix (system prompt + tools) into its session before the caller
        speaks, e.g. while the greeting plays, so the first turn prefills only the caller's words.
        Returns how many tokens the session cache now holds. (A call's brain submits the same
        request to the process's scheduler instead: Scheduler.submit_prefill.)"""
        req = self.warm_request(session, messages, tools, reasoning_effort)
        with session.lock:
            return self._prefill_only(session, req, guess=False)

    def prefill_ahead(self, session: Session, messages, tools=None, reasoning_effort: str = "low") -> int | None:
        """Speculative prefill: the prompt of a turn not yet decided (the caller's words as heard so
        far, while the end-of-turn wait runs). If the turn comes with the same words, only its last
        token is left to prefill; if not, the longest common prefix is kept and the rest is dropped.
        Returns the cached length, or None when skipped: the session is busy with a turn, or the
        guess would crop what the last turn left in the cache."""
        req = self.guess_request(session, messages, tools, reasoning_effort)
        if not session.lock.acquire(blocking=False):
            return None
        try:
            if session.would_crop(req.tokens):
                return None
            return self._prefill_only(session, req, guess=True)
        finally:
            session.lock.release()

    def _prefill_only(self, session: Session, req: Request, *, guess: bool) -> int:
        """Prefill `req`'s tokens into the session's cache (its lock held) and nothing more."""
        loop = DecodeLoop(self, session.cache)
        loop.admit([loop.plan(req, prefill_only=True)])
        loop.remove(req)  # prefilled only: the row stays the call's
        return session.hold(req.tokens, guess=guess)

    def run(self, req: Request, stop: threading.Event | None = None) -> Iterator[StreamEvent]:
        """Decode one prepared request by itself, over its call's own cache (or a fresh one)."""
        cache = req.session.cache if req.session is not None else self.new_cache()
        return DecodeLoop(self, cache).run(req, stop)

    def stream(self, messages, stop: threading.Event | None = None, **kw) -> Iterator[StreamEvent]:
        """Yield reasoning/answer text as blocks are committed, then a "done" event with the result.
        `stop`: set it to end the turn after the current forward pass (a barge-in, a guess dropped)."""
        req = self.prepare(messages, **kw)
        session = req.session
        lock = session.lock if session is not None else self._lock
        if not lock.acquire(timeout=60):
            raise SessionBusy("this session is busy with another turn")
        try:
            yield from self.run(req, stop)
        finally:
            lock.release()

    def chat(self, messages, **kw) -> ChatResult:
        for ev in self.stream(messages, **kw):
            if ev.type == "done":
                return ev.result
        raise RuntimeError("stream ended without a result")

    def request_for_tokens(self, tokens: list[int], params: DecodeParams) -> Request:
        """A request for raw prompt tokens (no chat rendering, tools or text rules): e.g. the teacher's."""
        req = Request(self, [], [], list(tokens), params, 0, False, "", [], None, "")
        req.guided = False
        return req

    def generate(self, reqs: list[Request], capacity: int = 1024) -> list[ChatResult]:
        """Decode prepared requests (no sessions) together in one batch; each prompt is prefilled alone."""
        cache = self.new_cache(batch=len(reqs), capacity=capacity)
        cache.ensure(min(cache.max_capacity, max(len(q.tokens) + q.params.max_tokens for q in reqs) + 32))
        return DecodeLoop(self, cache).run_batch(reqs)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


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


__all__ = ["DEFAULT_ADAPTER", "EFFORTS", "ChatResult", "DecodeParams", "Engine", "EngineInputError", "Request",
           "Session", "StreamEvent"]
