"""Rewriting a just-finished block before it enters the KV cache: control-tag repair and
schema-guided tool calls.

A finished block waits in `Sequence.pending` until the next forward writes it to the cache, so its
text can still be changed for free. A small dLLM often mangles its control tags when it commits
several tokens at once (`</>` for `</think>`, `<toolcall>` for `<tool_call>`); a mangled tag hides
the answer inside the reasoning or a call inside the answer. Those are repaired here, and once a
call is open the `ToolCallGuide` keeps it inside the tools' schemas (engine/text/tool_guide.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.text.chat_format import CALL_OPEN, THINK_CLOSE
from engine.text.tool_guide import ToolCallGuide

if TYPE_CHECKING:
    from engine.runtime.sequence import Sequence
    from engine.text.chat_format import OutputParser

# Inside a call the guide writes the skeleton and the model only short slots, so a block of B
# commits under one token a pass (0.81 on the sample call's booking, 21 passes at ~260 ms) while a
# 1-token pass costs about half a 4-token one: the call's slots decode one token a pass.
CALL_BLOCK_SIZE = 1
# Near misses only: an unknown closing tag while reasoning, a tool_call opener missing one character.
MANGLED_THINK_CLOSE = re.compile(r"</(?!think>|tool_call>)[a-z_]{0,8}>")
MANGLED_CALL_OPEN = re.compile(r"(?<![</\w])(?:<_?tool_?call>|tool_call>)")
# The reply's first block with its "<" swapped for a reply's usual first word ("Cantool_call>\n",
# "Suretool>"): the first position was committed last, from the other reply the model weighed.
# Only a whole opener ending the line or the block counts; "Sorrytool_call, I can only" is speech.
MANGLED_FIRST_OPEN = re.compile(r"^(\s*)[A-Za-z]{1,8}<?_?tool(?:_?call)?>*(?=\n|$)")


def repair_tags(text: str, reasoning: bool, tools: bool, answer_start: bool = False, before: str = "") -> str:
    """`answer_start`: `text` begins the reply (nothing of the answer before it). `before`: the
    text written just before `text`, which a tag may have begun: "<" there and "tool_call>" here
    is a whole opener, not one missing its "<" (a pass can end between the two)."""
    if reasoning:
        text = MANGLED_THINK_CLOSE.sub(THINK_CLOSE, text, count=1)
    if tools and CALL_OPEN not in before[-1:] + text:
        full = before + text
        m = MANGLED_CALL_OPEN.search(full, len(before))  # its look-behind sees `before`
        if m is not None:
            text = full[len(before):m.start()] + CALL_OPEN + full[m.end():]
    if tools and CALL_OPEN not in text:
        head, close, reply = text.rpartition(THINK_CLOSE)
        if close or (answer_start and not reasoning):
            text = head + close + MANGLED_FIRST_OPEN.sub(r"\1" + CALL_OPEN, reply, count=1)
    return text


class BlockRewriter:
    """A request's collaborator: after every step that finished a block, repair its tags and keep a
    tool call in its schema, editing the block only through the sequence's own methods
    (`rewrite_tail`, `narrow_blocks`, `ban_end_of_turn`, `propose`). It owns the call's `guide`."""

    def __init__(self, tools: list[dict] | None, tokenizer: Any, guide: ToolCallGuide | None = None) -> None:
        self.tools = tools
        self.tok = tokenizer
        self.guide = guide  # the schema guide of the call being written, once one is open

    def rewrite(self, st: Sequence, parser: OutputParser, reasoning_closed: bool,
                heard: Callable[[], str]) -> None:
        """`st.pending` holds the block just finished (not cached yet); `heard` gives the words a
        call's arguments may copy (drafts for the next pass)."""
        n = len(st.pending)
        guide = self.guide
        if not n or (st.done and st.finish_reason != "stop") or (guide is not None and guide.done):
            return
        if not self.tools and reasoning_closed:  # nothing here can need a rewrite: skip the decode
            return
        tok = self.tok
        tail = st.generated[-n:]
        eos = tail[-1:] if st.done and tail[-1] in st.eos_ids else []
        text = tok.decode(tail[: n - len(eos)], skip_special_tokens=False)
        answer_start = parser.mode == "answer" and not parser.answer and not parser.buf.strip() and not parser.tool_text
        head = tok.decode(st.generated[-n - 4 : -n], skip_special_tokens=False) if len(st.generated) > n else ""
        fixed = repair_tags(text, not reasoning_closed, bool(self.tools), answer_start, before=head)
        keep, forced, done = len(fixed), "", False
        if self.tools:
            start = 0
            if guide is None:
                k = (head + fixed).find(CALL_OPEN)
                if k >= 0 and k + len(CALL_OPEN) > len(head):
                    guide = self.guide = ToolCallGuide(self.tools)
                    start = k + len(CALL_OPEN) - len(head)
                    st.narrow_blocks(CALL_BLOCK_SIZE)
            if guide is not None:
                # An end of turn inside an open call is not the end: it is dropped, and banned from now on.
                st.ban_end_of_turn()
                edit = guide.feed(fixed[start:])
                if edit is not None:
                    keep, forced, done = start + edit.keep, edit.forced, edit.done
        in_call = guide is not None
        if fixed == text and not forced and keep == len(fixed) and not (in_call and eos):
            self._draft_from_guide(st, heard)
            return
        own = _own_tokens(tok, tail[: n - len(eos)], fixed[:keep])
        rest = fixed[:keep][len(tok.decode(own, skip_special_tokens=False)):]
        kept = own + tok.encode(rest, add_special_tokens=False).ids
        new = own + tok.encode(rest + forced, add_special_tokens=False).ids + ([] if in_call else eos)
        # The next block was sized before the rewrite: it is laid out again unless the call is complete.
        st.rewrite_tail(n, new, max(0, len(new) - len(eos) * (not in_call) - len(kept)),
                        stop=done, reopen=in_call or not st.done)
        self._draft_from_guide(st, heard)

    def _draft_from_guide(self, st: Sequence, heard: Callable[[], str]) -> None:
        """Inside a call, the next pass's drafts come from the guide: the skeleton and key it expects,
        or the rest of a value as the caller said it. The pool's drafts there came from other calls'
        arguments ('"patient_name": "' went on with another call's tool name), and the block is off."""
        guide = self.guide
        if guide is None or guide.done or st.done or not st.verifying:
            return
        text = guide.draft(heard())
        if text:
            st.propose(self.tok.encode(text, add_special_tokens=False).ids)


def _own_tokens(tok, ids: list[int], text: str) -> list[int]:
    """The longest run of the model's own tokens that spells the start of `text`: the rewrite keeps
    them as they are and encodes only what follows. Encoding the whole kept text again could split
    it otherwise ("Dec" "ember" read back as "December"), and the model would go on from tokens it
    never wrote, which also made a rewrite depend on how many tokens a pass had finished."""
    for j in range(len(ids), 0, -1):
        if text.startswith(tok.decode(ids[:j], skip_special_tokens=False)):
            return ids[:j]
    return []
