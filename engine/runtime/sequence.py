"""One sequence's decode state, changed only through its own methods.

A sequence decodes block by block. Its input to a pass is its `pending` tokens (final, not yet in
the KV cache) followed by its current block (masks where nothing is committed yet), so writing the
previous block is fused into the first denoising pass of the next one. After a pass the loop
commits the pending tokens to the cache (`after_forward`) and the chosen block positions
(`commit`); a full block becomes final (`generated`, `new_final`) and the next block opens.

Block layout rules come from the family: token shift (position i is predicted at i-1), blocks at
absolute multiples of B (`align_blocks`), the masked rest of the generation window
(`masked_window`), sub-blocks unmasked in order and the first token at once (Fast-dLLM v2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from engine.model.families import Family
from engine.runtime import pass_plan
from engine.runtime.drafts import DRAFT_TOKENS, KEY_LENGTHS, NgramDrafts


@dataclass
class DecodeParams:
    block_size: int
    threshold: float
    max_steps_per_block: int
    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    dedup_guard: bool = True
    order: str = "confidence"  # which positions commit: sampler.ORDERS


@dataclass(frozen=True)
class StepInput:
    """A sequence's input to one pass: `tokens` = pending + drafts + block + window masks."""

    tokens: list[int]
    n_pending: int
    n_block: int  # block positions in the input, window masks included (0: the block is not in it)
    window: int
    n_draft: int = 0  # drafts after the pending tokens, seen causally, their K/V not kept (verify)
    n_branch: int = 0  # masks after the block that see only the pending tokens (masks.with_branch)


def verifies(params: DecodeParams, family: Family) -> bool:
    """Whether a sequence decodes by order "verify": greedy, and where the cache is an AR cache."""
    return params.order == "verify" and params.temperature == 0 and family.verifies_drafts


class Sequence:
    def __init__(self, params: DecodeParams, family: Family, mask_id: int, eos_ids, row: int = 0,
                 next_logits: torch.Tensor | None = None, carry: list[int] | None = None, prompt_len: int = 0,
                 device: torch.device | str | None = None) -> None:
        self.params = params
        self.family = family
        self.mask_id = mask_id
        self.eos_ids = frozenset(eos_ids)
        self.row = row
        self.next_logits = next_logits  # predicts block[0] (token-shift families)
        self.pending: list[int] = []
        self.block: list[int] = []
        self.committed: list[bool] = []
        self.steps_in_block = 0
        self.generated: list[int] = []
        self.new_final: list[int] = []  # tokens finalised by the last step
        self.forced: list[int] = []  # tokens to append before the next block
        self.block_size = params.block_size  # of the blocks laid out from now on (narrow_blocks)
        self.done = False
        self.finish_reason: str | None = None
        self.forward_passes = 0
        self.infilled = 0  # tokens the engine wrote without the model (forced text, tool-call skeleton)
        self.banned: frozenset[int] = frozenset()  # tokens never committed (e.g. end of turn inside a tool call)
        self.generator: torch.Generator | None = None
        if params.temperature > 0:
            self.generator = torch.Generator(device=device or "cpu").manual_seed(
                params.seed if params.seed is not None else 0)
        # Families with blocks at absolute multiples of B (Family.align_blocks): `carry` holds the
        # prompt's leftover tokens for the first block, `prompt_len` the absolute length of the
        # prompt, and `offset` how many leading positions of the current block are final tokens
        # carried in (the prompt's leftover, or the tail of the previous output) rather than decoded.
        self.carry: list[int] = list(carry or [])
        self.prompt_len = prompt_len
        self.offset = 0
        self.prompt_pending = 0  # prompt tokens left to the first pass instead of a prefill (start)
        # order "verify" (engine/runtime/sampler.py): the last pass's block predictions, which the next pass
        # checks as an AR model would. Only greedy, and only where the cache is an AR cache.
        self.verifying = verifies(params, family)
        self.drafts: list[int] = []
        self.draft_odds: list[float] = []  # each draft's odds of holding, given the ones before held (pass_plan)
        self.draft_source = ""  # where they came from: "block" (its own predictions), "pool" or "guide"
        # How often the block's own drafts have held in this sequence: the odds the planner sizes blocks by.
        self.block_held = pass_plan.HoldRate(pass_plan.BLOCK_PRIOR_ODDS, pass_plan.BLOCK_PRIOR_ODDS,
                                             weight=pass_plan.BLOCK_PRIOR_WEIGHT / 2)
        self.pass_block = 0  # masks in the last pass's block (accept reads their predictions)
        self.pool: NgramDrafts | None = None  # where drafts come from beside the block (start)
        self.context: list[int] = []  # the prompt's last tokens, for the pool's keys
        self.drafts_proposed = 0
        self.drafts_accepted = 0

    @classmethod
    def start(cls, params: DecodeParams, family: Family, mask_id: int, eos_ids, row: int = 0,
              next_logits: torch.Tensor | None = None, carry: list[int] | None = None, prompt_len: int = 0,
              device: torch.device | str | None = None, pending: list[int] | None = None,
              pool: NgramDrafts | None = None, context: list[int] | None = None) -> Sequence:
        """A sequence right after its prompt's prefill, with its first block open. `pending`: the
        prompt's last tokens, not prefilled, which the first pass writes (engine/runtime/decode.py).
        `pool`, `context` (the prompt's last tokens): drafts for the "verify" order."""
        seq = cls(params, family, mask_id, eos_ids, row, next_logits, carry, prompt_len, device)
        seq.pending = list(pending or [])
        seq.prompt_pending = len(seq.pending)
        seq._new_block()
        if seq.verifying and pool is not None:
            seq.pool, seq.context = pool, list(context or [])[-max(KEY_LENGTHS):]
            # No drafts in a turn's first pass: it carries the prompt, and drafts there cost more
            # than they gave (bench, warm second turns, interleaved: TTFAT p50 67-75 ms without
            # them, 94-101 with; 1.66 tokens a pass against 1.61).
        return seq

    @classmethod
    def whole(cls, params: DecodeParams, family: Family, mask_id: int, eos_ids, tokens: list[int],
              forward_passes: int) -> Sequence:
        """A sequence decoded elsewhere in one go (a family's reference sampler): all of it final."""
        seq = cls(params, family, mask_id, eos_ids)
        cut = next((i for i, t in enumerate(tokens) if t in seq.eos_ids), None)
        seq.generated = tokens[: cut + 1] if cut is not None else tokens[: params.max_tokens]
        seq.new_final = list(seq.generated)
        seq.forward_passes = forward_passes
        seq.done, seq.finish_reason = True, ("stop" if cut is not None else "length")
        return seq

    def remaining(self) -> int:
        return self.params.max_tokens - len(self.generated)

    def committed_prefix(self) -> list[int]:
        """The current block's committed tokens left of its first open position (carried-in ones
        excluded), up to an end of turn. A committed position never changes, so these tokens are
        what the block will hold, unless a text rule rewrites the finished block (engine/text/request.py
        streams them only where none can)."""
        if self.done or not self.block:
            return []
        out = []
        for j in range(self.offset, len(self.block)):
            if not self.committed[j] or self.block[j] in self.eos_ids:
                break
            out.append(self.block[j])
        return out

    # -- one pass -----------------------------------------------------------------------------------
    def step_input(self, lean: bool = False, cost: Callable[[int], float] | None = None) -> StepInput:
        """This pass's input. `lean` (a pass over several rows, padded to the widest): verify drafts
        at most a block's worth and carries no branch, so that no row widens the whole batch.
        `cost` (verify): the pass's cost by width (engine/runtime/pass_cost.py, for the rows of the pass), by
        which the drafts, the block and (one row only) the branch are sized (engine/runtime/pass_plan.py);
        without it all of them go in, or in a batch a block's worth of drafts."""
        if self.verifying and cost is not None and self.block:
            return self._planned_input(cost, branch=not lean)
        if lean and self.verifying:
            self._keep_drafts(max(len(self.block) - 1, 0))
        with_block = self._needs_block_in_input()
        window = self._window() if with_block else 0
        block = self.block + [self.mask_id] * window if with_block else []
        self.pass_block = len(block)
        # verify: with drafts in the pass, a second block right after the pending tokens predicts
        # what follows in case the first draft fails (Sequence.accept).
        branch = [self.mask_id] * len(block) if self.drafts and block and self.verifying and not lean else []
        return StepInput(self.pending + self.drafts + block + branch, len(self.pending), len(block), window,
                         len(self.drafts), len(branch))

    def _planned_input(self, cost: Callable[[int], float], branch: bool) -> StepInput:
        rate = self.block_held.rate()
        odds = self.draft_odds + [rate] * (len(self.drafts) - len(self.draft_odds))  # drafts set by hand
        layout = pass_plan.plan(len(self.pending), odds, len(self.block), rate, cost)
        self._keep_drafts(layout.drafts)
        self.pass_block = layout.block
        block = [self.mask_id] * layout.block
        branch = block if layout.branch and branch else []
        return StepInput(self.pending + self.drafts + block + branch, len(self.pending), len(block), 0,
                         len(self.drafts), len(branch))

    def _keep_drafts(self, k: int) -> None:
        self.drafts, self.draft_odds = self.drafts[:k], self.draft_odds[:k]

    def _set_drafts(self, tokens: list[int], odds: list[float], source: str = "") -> None:
        self.drafts, self.draft_odds, self.draft_source = tokens, odds[: len(tokens)], source

    def begin_step(self) -> None:
        self.new_final = []

    def after_forward(self, next_logits: torch.Tensor | None) -> None:
        """The pass ran; its pending tokens are now in the cache and `next_logits` predicts what follows."""
        self.forward_passes += 1
        if self.pending:
            self.next_logits = next_logits
            self.pending = []

    def open_positions(self, n_block: int) -> list[int]:
        """The block positions a step may commit."""
        open_pos = [j for j, c in enumerate(self.committed) if not c]
        sub = self.family.sub_block
        if open_pos and sub and n_block:
            # Fast-dLLM v2: only the first sub-block that still has masks is unmasked this step.
            lo = open_pos[0] // sub * sub
            open_pos = [j for j in open_pos if j < lo + sub]
        return open_pos

    def first_only(self, n_block: int) -> bool:
        """With token shift and no block in the input, only position 0 had a prediction this step."""
        return self.family.token_shift and not n_block

    def source(self, j: int, n_pending: int) -> int | None:
        """Which token of this pass's input predicts block position `j` (None: `next_logits`)."""
        if self.family.token_shift:
            return None if j == 0 else n_pending + j - 1
        return n_pending + j

    def reads(self, inp: StepInput) -> int:
        """verify: how many predictions a pass reads: the next token after the pending ones, one
        after each draft, one after each block position, and one after each branch position but
        the last (whose prediction is for no position)."""
        if not inp.n_block:
            return inp.n_draft + 1
        return inp.n_draft + inp.n_block + inp.n_branch if inp.n_branch else inp.n_draft + inp.n_block

    def accept(self, tok: list[int], conf: list[float], draft_min: float) -> None:
        """verify: `tok`/`conf` are the pass's greedy predictions (`reads`): tok[i] is for the i-th
        position after the pending tokens. The drafts that match what the pass predicts before them
        are final, and so is the prediction after the last of those: exactly what AR decoding would
        write, at least one token a pass. The predictions for the positions after that are the next
        pass's drafts when every draft held (the block's, made after them), as far as their
        confidence stays at `draft_min` or more. After a failed draft they are not reused: reusing
        them (a Jacobi step) kept every later pass on drafts made after a wrong token, and tokens a
        pass fell from 1.66 to 1.33 on four simulated calls."""
        k, w = len(self.drafts), self.pass_block
        a = 0
        while a < k and self.drafts[a] == tok[a]:
            a += 1
        self.drafts_proposed += k
        self.drafts_accepted += a
        if self.draft_source == "block":
            self.block_held.record(k, a)
        elif self.draft_source == "pool" and self.pool is not None:
            self.pool.held.record(k, a)
        new = self.drafts[:a] + [tok[a]]
        # Every draft held: the block's predictions, made after them. One failed: the branch's, made
        # right after the pending tokens, for the positions past the new final ones.
        if a == k:
            later = zip(tok[k + 1:k + w], conf[k + 1:k + w], strict=True)
        else:
            at = k + w + 1 + a
            later = zip(tok[at:k + 2 * w], conf[at:k + 2 * w], strict=True)
        nxt: list[int] = []
        odds: list[float] = []
        for t, c in later:
            if c < draft_min:
                break
            nxt.append(t)
            odds.append(pass_plan.block_odds(c))
        self._set_drafts([], [])
        for t in new:
            self.generated.append(t)
            self.pending.append(t)
            self.new_final.append(t)
            if t in self.eos_ids:
                self.done, self.finish_reason = True, "stop"
                break
            if self.remaining() <= 0:
                self.done, self.finish_reason = True, "length"
                break
        if self.done:
            self.block, self.committed = [], []
            return
        pooled = self._pooled(nxt)
        if pooled is not nxt:
            odds = self.pool.held.odds(len(pooled))
        cut = next((i + 1 for i, t in enumerate(pooled) if t in self.eos_ids), len(pooled))
        self._set_drafts(pooled[: min(cut, self.remaining() - 1)], odds, "block" if pooled is nxt else "pool")

    def propose(self, tokens: list[int]) -> None:
        """verify: the next pass's drafts from a source that knows better than the pool and the
        block (a tool call's guide: the skeleton it expects, a value as the caller said it)."""
        if self.verifying and not self.done and tokens:
            kept = list(tokens[: max(min(DRAFT_TOKENS, self.remaining() - 1), 0)])
            self._set_drafts(kept, pass_plan.hold_odds("guide", len(kept)), "guide")

    def _pooled(self, block: list[int]) -> list[int]:
        """The next pass's drafts: what followed the last tokens before (the pool), where the match
        is long or agrees with the block's own first prediction; else the block's predictions."""
        if self.pool is None:
            return block
        seen, n = self.pool.propose((self.context + self.generated)[-max(KEY_LENGTHS):])
        if seen and (n == max(KEY_LENGTHS) or not block or seen[0] == block[0]):
            return seen
        return block

    def last_step(self) -> bool:
        """Whether the coming commit is the block's last allowed step (it then commits every position)."""
        return self.steps_in_block + 1 >= self.params.max_steps_per_block

    def commit(self, positions: list[int], tokens: list[int]) -> None:
        """Commit one step's chosen tokens at their block positions; a full block becomes final."""
        self.steps_in_block += 1
        for j, t in zip(positions, tokens, strict=True):
            self.block[j] = t
            self.committed[j] = True
        if all(self.committed):
            self._finish_block()

    # -- edits from outside the model (text rules) ------------------------------------------------------
    def force(self, tokens: list[int]) -> None:
        """Append `tokens` (e.g. a forced `</think>`) before the next block, which is laid out again."""
        self.forced = list(tokens)
        self._new_block()

    def stop(self) -> None:
        """End here (a stop string was found)."""
        self.done, self.finish_reason = True, "stop"

    def ban_end_of_turn(self) -> None:
        self.banned = self.eos_ids

    def rewrite_tail(self, n: int, new: list[int], infilled: int, *, stop: bool, reopen: bool) -> None:
        """Replace the last `n` final tokens (still pending, so not in the cache) by `new`.

        `stop`: the sequence ends with them; `reopen`: it goes on, with its next block sized again."""
        del self.generated[-n:]
        self.generated.extend(new)
        self._set_drafts([], [])  # made after the tail that is rewritten
        self.pending, self.new_final = list(new), list(new)
        self.infilled += infilled
        if stop:
            self.done, self.finish_reason, self.block, self.committed = True, "stop", [], []
            self.banned = frozenset()
        elif reopen:
            self.done, self.finish_reason = False, None
            self._new_block()

    def narrow_blocks(self, b: int) -> None:
        """Lay out the blocks after this one with at most `b` tokens. Families whose blocks sit at
        fixed positions (aligned, sub-blocked, or over a masked window) keep their size. A verifying
        sequence narrowed to 1 decodes as AR with the pool's drafts only: inside a tool call the
        block's drafts rarely held, and its masks made each pass of the call's slots wider."""
        if not (self.family.align_blocks or self.family.sub_block or self.family.masked_window):
            self.block_size = max(1, min(self.block_size, b))

    def move(self, row: int) -> None:
        self.row = row

    # -- blocks ---------------------------------------------------------------------------------------
    def _new_block(self) -> None:
        self._set_drafts([], [])  # made before the text was changed (forced text, a rewrite)
        if self.forced:
            self.infilled += len(self.forced)
            self.generated.extend(self.forced)
            self.pending.extend(self.forced)
            self.new_final.extend(self.forced)
            self.forced = []
        carry: list[int] = []
        if self.family.align_blocks:
            # The block spans [q*B, (q+1)*B): the final tokens already in that span (the prompt's
            # leftover, or the tail of the previous output when a rewrite or forced text moved
            # the boundary) sit in it as committed positions, not in the cache.
            bsz = max(self.params.block_size, 1)
            if self.carry:
                carry, self.carry = self.carry, []
            else:
                r = min((self.prompt_len + len(self.generated)) % bsz, len(self.pending))
                if r:
                    carry, self.pending = self.pending[-r:], self.pending[:-r]
        b = min(self.block_size - len(carry), self.remaining())
        if b <= 0:
            self.done, self.finish_reason = True, "length"
            self.block, self.committed = [], []
            self.pending.extend(carry)
            return
        self.block = carry + [self.mask_id] * b
        self.pass_block = len(self.block)  # until a pass is laid out otherwise (step_input)
        self.committed = [True] * len(carry) + [False] * b
        self.offset = len(carry)
        self.steps_in_block = 0
        if self.pool is not None and self.generated:  # after forced text: what followed it before
            pooled = self._pooled([])[: max(self.remaining() - 1, 0)]
            self._set_drafts(pooled, self.pool.held.odds(len(pooled)), "pool")

    def _needs_block_in_input(self) -> bool:
        # With token shift, position 0 of the block is predicted by the clean token before it, so
        # a block whose only open position is 0 does not need to be in the input (AR mode).
        if not self.family.token_shift:
            return True
        if self.family.first_token_at_once and self.committed and not self.committed[0]:
            # Fast-dLLM v2: the block's first token is committed from the logits of the pass that
            # wrote the previous block (or of the prefill) before the block is denoised, so that
            # pass carries only the pending tokens (or there is none: the prefill gave them).
            return False
        return any(not c for c in self.committed[1:])

    def _window(self) -> int:
        """Full-diffusion families (LLaDA, Dream) were trained to see the whole generation window:
        the block is followed by masks up to max_tokens (rounded up to whole blocks), as their
        samplers lay it out. Their predictions are not read; their K/V are never kept."""
        if not self.family.masked_window:
            return 0
        b = max(self.params.block_size, 1)
        total = -(-self.params.max_tokens // b) * b
        return max(0, total - len(self.generated) - (len(self.block) - self.offset))

    def _finish_block(self) -> None:
        carried, toks = self.block[: self.offset], self.block[self.offset:]
        for i, t in enumerate(toks):
            if t in self.eos_ids:
                toks = toks[: i + 1]
                self.done, self.finish_reason = True, "stop"
                break
        self.generated.extend(toks)
        self.pending.extend(carried + toks)
        self.new_final.extend(toks)
        self.offset = 0
        if not self.done and self.remaining() <= 0:
            self.done, self.finish_reason = True, "length"
        if not self.done:
            self._new_block()
        else:
            self.block, self.committed = [], []


__all__ = ["DecodeParams", "Sequence", "StepInput", "verifies"]
