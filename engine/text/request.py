"""One chat turn in flight, on the text side: its prompt, its decode state (a `Sequence`), and the
text it produced so far.

The decode loop (engine/runtime/decode.py) prefills it, steps its sequence and calls `absorb` after each
step; `absorb` turns newly final tokens into events and applies the text rules (tag repair and
schema-guided tool calls, stop strings, the thinking budget) through the sequence's methods.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from engine.runtime.results import ChatResult, StreamEvent
from engine.runtime.sequence import DecodeParams, Sequence
from engine.text.block_rewrite import BlockRewriter
from engine.text.chat_format import THINK_CLOSE, OutputParser
from engine.text.grounding import ground_calls, source_texts
from engine.text.tool_calls import parse_tool_calls
from engine.text.tool_guide import ToolCallGuide

if TYPE_CHECKING:
    from engine.runtime.session import Session


class RequestContext(Protocol):
    """What a request reads of the engine that made it (`Engine` is one)."""

    tokenizer: Any
    model_name: str
    guided_tools: bool             # repair mangled tags, keep calls in their schemas (engine/text/block_rewrite.py)
    stream_committed_prefix: bool  # stream the part of a block that is already final

    def count_tokens(self, text: str) -> int: ...

    def run(self, req: Request) -> Iterator[StreamEvent]: ...


# Text that block_rewrite may still rewrite: tags (and their mangled forms) and a bare "tool_call".
_REWRITABLE = ("<", ">", "tool_call", "toolcall")


def safe_stream_cut(full: str, start: int, stops: list[str]) -> int:
    """How much of `full` may stream when its part after `start` is a block not yet finished: up to
    the first rewritable text, stop string or broken character, less a tail that may begin one."""
    cut = len(full)
    for s in (*_REWRITABLE, *stops, "\ufffd"):
        i = full.find(s, max(0, start - len(s) + 1))
        if i >= 0:
            cut = min(cut, i)
    held = full[:cut]
    hold = 0
    for s in (*_REWRITABLE, *stops):
        for k in range(len(s) - 1, hold, -1):
            if held.endswith(s[:k]):
                hold = k
                break
    return max(start, cut - hold)


class Request:
    def __init__(self, engine: RequestContext, messages, tools, tokens: list[int], params: DecodeParams,
                 thinking_budget: int, thinking: bool, prefix: str, stops: list[str], session: Session | None,
                 effort: str,
                 guided: bool | None = None, guide: ToolCallGuide | None = None) -> None:
        self.engine, self.messages, self.tools, self.tokens = engine, messages, tools, tokens
        self.params, self.thinking_budget, self.thinking = params, thinking_budget, thinking
        self.prefix, self.stops, self.session, self.effort = prefix, stops, session, effort
        self.parser = OutputParser(in_reasoning=thinking, one_call=bool(prefix))
        if prefix:  # a forced tool call: the prompt already opened <tool_call>, so the output is its body
            self.parser.mode = "tool"
        self.call_announced = not prefix
        self.opening_announced = False  # a reply that began "<tool" was announced as a call (_opening_call)
        self.opening_echoed = False  # ... and the parser's announcement of that call was dropped
        self.state: Sequence | None = None
        self.t0 = time.perf_counter()
        self.t_prefill_end = 0.0
        self.prefill_ms = 0.0
        self.cached_tokens = 0
        self.text = ""
        self.ttft_ms: float | None = None
        self.ttfat_ms: float | None = None
        self.reasoning_closed = not thinking
        self.stopped_by_string = False
        # Repair mangled control tags and keep tool calls in their schemas (engine/text/block_rewrite.py).
        # `guided` (None: the engine's setting); `guide`: a call the prompt already opened (tool_choice)
        guided = engine.guided_tools if guided is None else guided
        self.rewriter = BlockRewriter(tools, engine.tokenizer, guide) if guided else None
        self._heard: str | None = None
        self.early = engine.stream_committed_prefix
        # Stream a "tool_args" event with the call's text each time it grows (Engine.prepare's
        # call_progress), so a caller can act on arguments before the call is complete.
        self.call_progress = False
        self._call_text_sent = ""

    @property
    def guide(self) -> ToolCallGuide | None:
        """The schema guide of the tool call being written, once one is open."""
        return self.rewriter.guide if self.rewriter is not None else None

    def _ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1000

    # -- driven by the decode loop -------------------------------------------------------------------
    def begin(self, seq: Sequence, cached_tokens: int, t_prefill_start: float, t_prefill_end: float) -> None:
        """The prompt is prefilled (its first `cached_tokens` came from a cache) and `seq` decodes it."""
        self.state = seq
        self.cached_tokens = cached_tokens
        self.t_prefill_end = t_prefill_end
        self.prefill_ms = (t_prefill_end - t_prefill_start) * 1000

    def run_alone(self) -> Iterator[StreamEvent]:
        """Decode this request by itself (Engine.run; Engine.stream also holds the session's lock)."""
        return self.engine.run(self)

    def absorb(self) -> list[StreamEvent]:
        """Turn newly final tokens into events; apply stop strings and the thinking budget. A forced
        call (the prompt opened it: tool_choice) is announced with the first events, as a call the
        model opens is, so that a voice agent can say its filler now."""
        events = self._absorb()
        events = self._opening_call() + events
        if not self.call_announced:
            self.call_announced = True
            events.insert(0, StreamEvent("tool_call", "", self._ms()))
        return events

    def _absorb(self) -> list[StreamEvent]:
        st = self.state
        if not st.new_final:
            return self._absorb_committed_prefix() if self.early else []
        if self.rewriter is not None:
            self.rewriter.rewrite(st, self.parser, self.reasoning_closed, self.heard)
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
                st.stop()
                final = True
                self.stopped_by_string = True
        events = self._feed(delta, final)
        if self.call_progress and not final and self.parser.tool_text != self._call_text_sent:
            self._call_text_sent = self.parser.tool_text
            events.append(StreamEvent("tool_args", self.prefix + self.parser.tool_text, self._ms(), self.snapshot()))
        if not self.reasoning_closed and self.parser.mode != "reasoning":
            self.reasoning_closed = True
        if (not self.reasoning_closed and not st.done and st.steps_in_block == 0
                and len(st.generated) >= self.thinking_budget):
            # The thinking budget is spent: close the thought and make the model answer.
            st.force(tok.encode("\n</think>\n\n", add_special_tokens=False).ids)
            self.reasoning_closed = True
        if self.early:
            events += self._absorb_committed_prefix()
        return events

    def _absorb_committed_prefix(self) -> list[StreamEvent]:
        """Stream the answer text of the current block's committed left part before the block
        completes (a block of B tokens otherwise streams only after its slowest position).

        Only text no later rule can change goes out: answer text (reasoning closed, no call open),
        cut before any "<" or ">" (a tag, or a mangled one, that block_rewrite may repair), any
        stop string, a bare "tool_call" (repaired into a call opener), or an undecodable byte; and
        holding back a tail that could begin a stop string or "tool_call". What the finished block
        then adds is exactly the rest of the text, so the streamed text equals the final one."""
        st = self.state
        if st.done or not self.reasoning_closed or self.parser.mode != "answer" or self.guide is not None:
            return []
        toks = st.committed_prefix()
        if not toks:
            return []
        full = self.engine.tokenizer.decode(st.generated + toks, skip_special_tokens=True)
        if not full.startswith(self.text):
            return []
        cut = safe_stream_cut(full, len(self.text), self.stops)
        if cut <= len(self.text):
            return []
        delta, self.text = full[len(self.text):cut], full[:cut]
        if self.ttft_ms is None:
            self.ttft_ms = self._ms()
        return self._feed(delta)

    def _opening_call(self) -> list[StreamEvent]:
        """A reply whose committed text begins "<tool" is a call: announce it now. The opener is five
        tokens, so the parser sees it whole only when its second block finishes, a pass or two (~100 ms
        on a call) after the first; a voice agent says its filler on this event."""
        if self.opening_announced or not self.tools or not self.call_announced or self.parser.mode != "answer":
            return []
        if self.parser.answer.strip() or self.parser.tool_text or not self.reasoning_closed or self.state is None:
            return []
        st = self.state
        # Under "verify" nothing is committed ahead of the final tokens, but the pass that made "<"
        # final also predicted what follows it (the next pass's drafts): "<" then "tool_call>" is
        # announced then, not one pass later when the opener is final.
        ahead = st.drafts if st.verifying else st.committed_prefix()
        text = self.engine.tokenizer.decode(st.generated + ahead, skip_special_tokens=True)
        if not text.rpartition(THINK_CLOSE)[2].lstrip().startswith("<tool"):
            return []
        self.opening_announced = True
        return [StreamEvent("tool_call", "", self._ms())]

    def _feed(self, delta: str, final: bool = False) -> list[StreamEvent]:
        """New text through the output parser, as events; the first answer event sets TTFAT."""
        events = [StreamEvent(kind, text, self._ms()) for kind, text in self.parser.feed(delta, final=final)]
        if self.opening_announced and not self.opening_echoed:  # the parser's own word on that call
            i = next((i for i, e in enumerate(events) if e.type == "tool_call"), None)
            if i is not None:
                self.opening_echoed = True
                del events[i]
        if self.ttfat_ms is None and any(e.type == "answer" for e in events):
            self.ttfat_ms = events[0].t_ms
        return events

    def heard(self) -> str:
        """The words a call's arguments copy (engine/text/grounding.py's sources: the caller's turns, tool
        results, earlier calls' arguments), oldest first: drafts for a call's string values."""
        if self._heard is None:
            self._heard = "\n".join(reversed(source_texts(self.messages)))
        return self._heard

    def abandon(self) -> None:
        """A turn stopped early (barge-in, disconnect, error): record what the call's cache really
        holds, so its next turn reuses the prompt and re-prefills only what differs."""
        if self.session is None:
            return
        generated = self.state.generated if self.state is not None else []
        self.session.record(self.tokens + generated, self.messages, prompt_len=len(self.tokens))

    def finish(self) -> ChatResult:
        """Build the result and record the turn in the session (whose cache already holds it)."""
        st = self.state
        tail = self.parser.feed("", final=True)
        for kind, _ in tail:
            if kind == "answer" and self.ttfat_ms is None:
                self.ttfat_ms = self._ms()
        parsed = parse_tool_calls(self.prefix + self.parser.tool_text, self.tools) if (
            self.tools and (self.parser.tool_text or self.prefix)) else None
        answer = self.parser.answer.strip()
        reasoning = self.parser.reasoning.strip()
        tool_calls = parsed.calls if parsed else []
        repairs = ground_calls(tool_calls, self.tools, self.messages) if tool_calls else []
        finish = "tool_calls" if tool_calls else ("stop" if st.finish_reason == "stop" else st.finish_reason or "stop")
        metrics = self._metrics(reasoning, [vars(r) for r in repairs])
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
            self.session.record(self.tokens + st.generated, list(self.messages) + [result.message()],
                                prompt_len=len(self.tokens))
        return result

    def snapshot(self) -> ChatResult:
        """The request so far, unfinished (`finish_reason` "partial"): its metrics up to now."""
        reasoning = self.parser.reasoning.strip()
        return ChatResult(text=self.parser.answer.strip(), reasoning=reasoning, tool_calls=[], tool_errors=[],
                          finish_reason="partial", metrics=self._metrics(reasoning), model=self.engine.model_name,
                          raw_text=self.text)

    def _metrics(self, reasoning: str, repairs: list[dict] | None = None) -> dict:
        """The request's metrics now; `repairs`: the finished calls' grounded arguments mended."""
        st = self.state
        decode_s = max(time.perf_counter() - self.t_prefill_end, 1e-9)
        n = len(st.generated)
        return {
            "ttft_ms": round(self.ttft_ms, 2) if self.ttft_ms is not None else None,
            "ttfat_ms": round(self.ttfat_ms, 2) if self.ttfat_ms is not None else None,
            "prefill_ms": round(self.prefill_ms, 2),
            # prompt tokens the first decoding pass wrote instead of a prefill pass (DecodeLoop.run)
            "prefill_in_first_pass": st.prompt_pending,
            "decode_ms": round(decode_s * 1000, 2),
            "total_ms": round(self._ms(), 2),
            "decode_tok_s": round(n / decode_s, 2),
            # Only what the model decoded: infilled text (the tool-call skeleton) came for free.
            "tokens_per_forward": round((n - st.infilled) / max(st.forward_passes, 1), 3),
            "infilled_tokens": st.infilled,
            # grounded arguments mended to the conversation's words (engine/text/grounding.py)
            "argument_repairs": repairs or [],
            "forward_passes": st.forward_passes,
            "completion_tokens": n,
            "reasoning_tokens": self.engine.count_tokens(reasoning) if reasoning else 0,
            "prompt_tokens": len(self.tokens),
            "cached_tokens": self.cached_tokens,
            "block_size": self.params.block_size,
            "threshold": self.params.threshold,
            # What decided the commits: "verify" falls back to "prefix" where it cannot verify.
            "order": "verify" if self.state.verifying else ("prefix" if self.params.order == "verify"
                                                            else self.params.order),
            "reasoning_effort": self.effort,
            "model": self.engine.model_name,
        }


__all__ = ["Request"]
