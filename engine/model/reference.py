"""Reference decoding: each dLLM family's own sampler, reproduced exactly on the engine's model.

`Engine.load(path, decoding="reference")` decodes with these. Each function follows one public
reference implementation at its documented greedy settings, step for step: which positions are
in each forward, what they attend, which logits are read, and which tokens commit. The golden
fixtures in tests/fixtures/dllm/ (made from the reference code by
tests/fixtures/make_dllm_fixtures.py) check that they agree token for token.

| family | reference | settings (REFERENCE_SETTINGS) |
| --- | --- | --- |
| sdar | JetAstra/SDAR generate.py `block_diffusion_generate` | block 4, 4 denoising steps, low_confidence_dynamic, threshold 0.9, top_k 1 (greedy) |
| fast_dllm_v2 | Fast_dLLM_v2 modeling.py `generate` (run_chatbot.py settings) | block 32, sub-blocks of 8, threshold 0.9, temperature 0, no block cache |
| llada | ML-GSAI/LLaDA generate.py `generate` | block 32, steps = gen_length (one token per step), low_confidence, temperature 0, no cache |
| dream | Fast-dLLM dream generation_utils_block.py `_sample` | block 32, confidence_threshold 0.9, temperature 0, prefix cache refreshed per block |

What these samplers do that the engine's own decoder (engine/runtime/decode.py) does not: blocks sit at
absolute multiples of the block size, so the prompt's last partial block is decoded together with
the first masks (SDAR, Fast-dLLM v2); Fast-dLLM v2 unmasks 8-token sub-blocks in order and takes
each block's first token from the previous block's last logits; LLaDA and Dream show the model the
whole masked remainder of the generation window. None of them streams a block before it is final,
and none has the engine's duplicate guard or step caps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from engine.model.kv_cache import KVCache
from engine.model.transformer import Transformer

REFERENCE_SETTINGS: dict[str, dict] = {
    "sdar": {"block_length": 4, "denoising_steps": 4, "confidence_threshold": 0.9, "top_k": 1},
    "fast_dllm_v2": {"block_size": 32, "small_block_size": 8, "threshold": 0.9},
    "llada": {"block_length": 32},
    "dream": {"block_length": 32, "threshold": 0.9},
}


@dataclass
class ReferenceOutput:
    tokens: list[int]  # generated tokens as the reference returns them (SDAR: up to the last decoded block)
    forward_passes: int


class ReferenceDecoder:
    """Runs one family's reference sampler over a prompt (batch of one, from an empty cache)."""

    def __init__(self, model: Transformer, family: str, mask_id: int, stop_ids: set[int],
                 block_size: int | None = None) -> None:
        if family not in REFERENCE_SETTINGS:
            raise ValueError(f"no reference sampler for family {family!r}; reference decoding covers "
                             f"{', '.join(REFERENCE_SETTINGS)}")
        self.model, self.family, self.mask_id = model, family, mask_id
        self.stop_ids = set(stop_ids)
        self.settings = dict(REFERENCE_SETTINGS[family])
        if block_size:
            key = "block_size" if family == "fast_dllm_v2" else "block_length"
            self.settings[key] = int(block_size)
        self.passes = 0

    @property
    def block_size(self) -> int:
        return int(self.settings.get("block_size") or self.settings["block_length"])

    def generate(self, prompt: list[int], max_tokens: int) -> ReferenceOutput:
        self.passes = 0
        fn = {"sdar": self._sdar, "fast_dllm_v2": self._fast_dllm_v2, "llada": self._llada,
              "dream": self._dream}[self.family]
        with torch.inference_mode():
            toks = fn(list(prompt), max_tokens)
        return ReferenceOutput(toks, self.passes)

    # -- one forward ---------------------------------------------------------------------------
    def _cache(self, n: int) -> KVCache:
        cfg = self.model.cfg
        return KVCache(cfg.n_layers, 1, cfg.n_kv_heads, cfg.head_dim, max(n, 16), self.model.dtype,
                       max_capacity=max(n, 16))

    def _forward(self, cache: KVCache, tokens: list[int], intra: torch.Tensor, commit: bool) -> torch.Tensor:
        """Logits [T, V] for `tokens` placed after the cache's committed length; `intra` is their
        mutual visibility (every committed slot is visible). `commit` keeps their K/V."""
        t = len(tokens)
        mask, _ = cache.mask(intra, t)
        slots = cache.slots_for(t)
        h = self.model.hidden(torch.tensor([tokens]), slots, mask, cache, slots)
        self.passes += 1
        if commit:
            cache.commit(t)
        return self.model.lm_head(h[0]).float()

    @staticmethod
    def _block_causal(n: int, b: int) -> torch.Tensor:
        blk = torch.arange(n) // b
        return blk[None, :] <= blk[:, None]

    # -- SDAR ----------------------------------------------------------------------------------
    def _sdar(self, ids: list[int], gen_length: int) -> list[int]:
        """JetAstra/SDAR generate.py, block_diffusion_generate: blocks at multiples of B over the
        whole sequence; the prompt's full blocks are prefilled block-causally; each later block
        (the first one holding the prompt's leftover tokens) is denoised for up to `steps` passes
        over the block alone (bidirectional inside, reading the cache), then one pass stores it."""
        s = self.settings
        b, steps, thr, top_k = s["block_length"], s["denoising_steps"], s["confidence_threshold"], s["top_k"]
        p = len(ids)
        num_blocks = (p + gen_length + b - 1) // b
        x = torch.full((num_blocks * b,), self.mask_id, dtype=torch.long)
        x[:p] = torch.tensor(ids)
        cache = self._cache(num_blocks * b)
        prefill_blocks = p // b
        if prefill_blocks:
            n = prefill_blocks * b
            self._forward(cache, x[:n].tolist(), self._block_causal(n, b), commit=True)
        base, rem = divmod(b, steps)
        num_transfer = [base + (1 if i < rem else 0) for i in range(steps)]
        full = torch.ones(b, b, dtype=torch.bool)
        for blk in range(prefill_blocks, num_blocks):
            cur = x[blk * b:(blk + 1) * b].clone()
            for step in range(steps + 1):
                mask_index = cur == self.mask_id
                if not bool(mask_index.any()):
                    self._forward(cache, cur.tolist(), full, commit=True)
                    break
                logits = self._forward(cache, cur.tolist(), full, commit=False)
                if top_k > 0:
                    kth = torch.topk(logits, top_k).values[..., -1, None]
                    logits = torch.where(logits < kth, torch.full_like(logits, float("-inf")), logits)
                probs = torch.softmax(logits, -1)
                x0_p, x0 = probs.max(-1)  # top_k 1: the one surviving token, probability 1
                confidence = torch.where(mask_index, x0_p, torch.tensor(float("-inf")))
                high = confidence > thr
                transfer = torch.zeros(b, dtype=torch.bool)
                if int(high.sum()) >= num_transfer[step]:
                    transfer = high
                else:
                    transfer[torch.topk(confidence, num_transfer[step]).indices] = True
                cur[transfer] = x0[transfer]
            x[blk * b:(blk + 1) * b] = cur
            end = (blk + 1) * b
            if any(int(t) in self.stop_ids for t in x[p:]):
                break
        return x[p:end].tolist() if num_blocks > prefill_blocks else []

    # -- Fast_dLLM_v2 ---------------------------------------------------------------------------
    def _fast_dllm_v2(self, ids: list[int], max_tokens: int) -> list[int]:
        """Fast_dLLM_v2's generate (modeling.py), use_block_cache=False: the prompt's full blocks
        are prefilled block-causally and, when the prompt ends on a block boundary, the first
        token comes from the prefill's last logits. Each block (prompt leftover + masks) is
        unmasked one 8-token sub-block at a time, in order; predictions are token-shifted (the
        output at i-1 predicts i); a finished block is written to the cache in one more pass
        whose last logits give the next block's first token."""
        s = self.settings
        b, small, thr = s["block_size"], s["small_block_size"], s["threshold"]
        stop = self._single_stop()
        max_new = math.ceil(max_tokens / b) * b
        orig = len(ids)
        seq = list(ids)
        cache = self._cache(orig + max_new + 2 * b)
        if len(seq) > b:
            n = len(seq) // b * b
            logits = self._forward(cache, seq[:n], self._block_causal(n, b), commit=True)
            if len(seq) % b == 0:
                seq.append(int(logits[-1].argmax()))
        full = torch.ones(b, b, dtype=torch.bool)

        def stop_reached(x: list[int], plen: int) -> bool:
            tail = x[plen:]
            if stop not in tail:
                return False
            return self.mask_id not in tail[: tail.index(stop)]

        for _ in range(max_new // b):
            if stop in seq[orig:]:
                break
            plen = len(seq)
            x = seq + [self.mask_id] * (b - plen % b)
            assert int(cache.lengths[0]) == len(x) - b, "the cache must end where the block starts"
            while True:
                if stop_reached(x, plen):
                    break
                if self.mask_id not in x[-b:]:
                    logits = self._forward(cache, x[-b:], full, commit=True)
                    x.append(int(logits[-1].argmax()))
                    break
                for sb in range(b // small):
                    s0, s1 = sb * small, sb * small + small
                    while True:
                        blk = x[-b:]
                        if self.mask_id not in blk[s0:s1] or stop_reached(x, plen):
                            break
                        logits = self._forward(cache, blk, full, commit=False)
                        logits = torch.cat([logits[:1], logits[:-1]])[s0:s1]
                        p = torch.softmax(logits, -1)
                        x1 = p.argmax(-1)
                        x1_p = p.gather(-1, x1[:, None]).squeeze(-1)
                        masked = torch.tensor([t == self.mask_id for t in blk[s0:s1]])
                        x1_p = torch.where(masked, x1_p, torch.tensor(float("-inf")))
                        unmask = x1_p > thr
                        unmask[int(x1_p.argmax())] = True
                        unmask &= masked
                        base = len(x) - b + s0
                        for j in range(small):
                            if unmask[j]:
                                x[base + j] = int(x1[j])
            seq = x
        out = seq[orig:]
        if stop in out:
            out = out[: out.index(stop) + 1]
        return out

    def _single_stop(self) -> int:
        # Fast_dLLM_v2's generate takes one stop_token (its config's eos_token_id).
        if len(self.stop_ids) != 1:
            raise ValueError(f"Fast_dLLM_v2's sampler takes exactly one stop token; got {sorted(self.stop_ids)}")
        return next(iter(self.stop_ids))

    # -- LLaDA -----------------------------------------------------------------------------------
    def _llada(self, ids: list[int], max_tokens: int) -> list[int]:
        """ML-GSAI/LLaDA generate.py, `generate` (temperature 0, cfg 0, low_confidence): the whole
        canvas (prompt + generation window of masks) goes through every pass with full attention
        and no cache; blocks of 32 are filled left to right, one token per step (steps =
        gen_length), the most confident masked position of the current block first."""
        b = self.settings["block_length"]
        gen_length = math.ceil(max_tokens / b) * b
        steps = gen_length
        p = len(ids)
        x = torch.full((p + gen_length,), self.mask_id, dtype=torch.long)
        x[:p] = torch.tensor(ids)
        num_blocks = gen_length // b
        steps_per_block = steps // num_blocks
        n = p + gen_length
        full = torch.ones(n, n, dtype=torch.bool)
        for blk in range(num_blocks):
            block_mask = x[p + blk * b: p + (blk + 1) * b] == self.mask_id
            count = int(block_mask.sum())
            base, rem = divmod(count, steps_per_block)
            num_transfer = [base + (1 if i < rem else 0) for i in range(steps_per_block)]
            for i in range(steps_per_block):
                mask_index = x == self.mask_id
                logits = self._forward(self._cache(n), x.tolist(), full, commit=False)
                x0 = logits.argmax(-1)
                p_ = torch.softmax(logits, -1)
                x0_p = p_.gather(-1, x0[:, None]).squeeze(-1)
                x0_p[p + (blk + 1) * b:] = float("-inf")
                x0 = torch.where(mask_index, x0, x)
                confidence = torch.where(mask_index, x0_p, torch.tensor(float("-inf")))
                sel = torch.topk(confidence, k=num_transfer[i]).indices
                x[sel] = x0[sel]
        return x[p:].tolist()  # the whole window: the reference never stops early

    # -- Dream -----------------------------------------------------------------------------------
    def _dream(self, ids: list[int], max_tokens: int) -> list[int]:
        """Fast-dLLM's Dream sampler (generation_utils_block.py `_sample`, alg
        confidence_threshold, use_cache without dual cache): at each block start one full pass
        over the whole canvas gives the block's first token and the prefix K/V (kept up to the
        block start); then the block and the masked rest of the window are forwarded over that
        prefix until the block is full, committing every masked block position whose confidence
        clears the threshold (at least the most confident). Predictions are token-shifted."""
        b, thr = self.settings["block_length"], self.settings["threshold"]
        gen_length = math.ceil(max_tokens / b) * b
        p = len(ids)
        n = p + gen_length
        x = torch.full((n,), self.mask_id, dtype=torch.long)
        x[:p] = torch.tensor(ids)
        for blk in range(gen_length // b):
            start, end = p + blk * b, p + (blk + 1) * b
            cache = self._cache(n)
            logits = self._forward(cache, x.tolist(), torch.ones(n, n, dtype=torch.bool), commit=False)
            logits = torch.cat([logits[:1], logits[:-1]])
            x[start] = int(logits[start].argmax())
            cache.commit(start)  # keep the prefix K/V of that full pass
            while True:
                tail = x[start:]
                mask_index = tail == self.mask_id
                t = len(tail)
                logits = self._forward(cache, tail.tolist(), torch.ones(t, t, dtype=torch.bool), commit=False)
                logits = torch.cat([logits[:1], logits[:-1]])
                probs = torch.softmax(logits[mask_index], -1)
                confidence, x0 = probs.max(-1)
                x_ = torch.full_like(tail, self.mask_id)
                full_conf = torch.full((t,), float("-inf"))
                x_[mask_index] = x0
                full_conf[mask_index] = confidence
                full_conf[b:] = float("-inf")
                k = int((x[start:end] == self.mask_id).sum())
                sel_conf, sel = torch.topk(full_conf, k)
                # The most confident masked block position always; the others at >= threshold.
                transfer = torch.zeros(t, dtype=torch.bool)
                transfer[sel[sel_conf >= thr]] = True
                transfer[sel[0]] = True
                x[start:][transfer] = x_[transfer]
                if not bool((x[start:end] == self.mask_id).any()):
                    break
        return x[p:].tolist()
