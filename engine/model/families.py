"""Checkpoint families: how each kind of checkpoint is decoded.

One row per family says its attention mode, default block size, mask token, whether the
prediction for position i is read at i-1 (token shift), and how its prefix is cached.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    # "causal": an AR model; "block_causal": bidirectional inside a block, causal across blocks;
    # "bidirectional": full-diffusion (LLaDA/Dream), decoded semi-autoregressively in blocks.
    attention: str
    block_size: int
    mask_token: str | None
    mask_token_id: int | None
    token_shift: bool
    # How finished tokens attend each other in the cache. "causal" makes the cache exactly an AR
    # cache; "block" keeps blocks bidirectional (SDAR); "full" is the approximate prefix cache
    # (Fast-dLLM) of full-diffusion models.
    cache_attention: str
    description: str
    # "chatml": the engine's own ChatML (tools, <think>); "checkpoint": the checkpoint's own chat
    # template, rendered as transformers renders it (dLLM checkpoints, whose references use it).
    chat_template: str = "chatml"
    # Whether the family's reference ever writes <think> (only then does an effort add thinking).
    thinking: bool = True
    # Blocks at absolute multiples of block_size, the prompt's leftover tokens decoded in the first
    # block with its masks (SDAR, Fast-dLLM v2). False: the first block starts where the prompt
    # ends (the embedded default, which was trained that way).
    align_blocks: bool = False
    # Full diffusion (LLaDA, Dream): every pass over a block also carries the masked rest of the
    # generation window, the layout their samplers use and they were trained on.
    masked_window: bool = False
    # Fast-dLLM v2: unmask sub-blocks of this many positions in order (0: the whole block at once),
    # and commit a block's first token from the pass that wrote the previous block (or from the
    # prefill) before the block is denoised: one unfused write pass per block, as the reference.
    sub_block: int = 0
    first_token_at_once: bool = False

    @property
    def verifies_drafts(self) -> bool:
        """Whether a pass can check the previous pass's block predictions as an AR model would
        (engine/runtime/sampler.py "verify"): a mask token, a cache that is exactly an AR cache, token shift,
        and blocks that start where the last final token ends."""
        return (self.attention == "block_causal" and self.cache_attention == "causal" and self.token_shift
                and not (self.align_blocks or self.sub_block or self.masked_window or self.first_token_at_once))


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("ar", "causal", 1, None, None, True, "causal", "plain autoregressive Llama/Qwen2/Qwen3"),
        Family(
            "smollm2-dllm", "block_causal", 8, "<empty_output>", None, True, "causal",
            "the embedded default: SmolLM2-135M-Instruct adapted to block diffusion (causal clean cache)",
        ),
        Family("sdar", "block_causal", 4, "<|MASK|>", 151669, False, "block", "SDAR-Chat (Qwen3, block 4)",
               chat_template="checkpoint", align_blocks=True),
        Family(
            "fast_dllm_v2", "block_causal", 32, "|<MASK>|", 151665, True, "block",
            "Fast_dLLM_v2 (Qwen2.5, block 32 with sub-blocks of 8, token shift)",
            chat_template="checkpoint", thinking=False, align_blocks=True, sub_block=8, first_token_at_once=True,
        ),
        Family("llada", "bidirectional", 32, None, 126336, False, "full", "LLaDA-8B-Instruct (full diffusion)",
               chat_template="checkpoint", thinking=False, masked_window=True),
        Family("dream", "bidirectional", 32, "<|mask|>", 151666, True, "full", "Dream-7B-Instruct (full diffusion)",
               chat_template="checkpoint", thinking=False, masked_window=True),
    ]
}


def detect_family(config: dict, folder_name: str = "") -> Family:
    """Pick the family from a checkpoint's config.json (and, failing that, its folder name)."""
    if "dllm_family" in config:
        return FAMILIES[config["dllm_family"]]
    model_type = str(config.get("model_type", "")).lower()
    arch = " ".join(config.get("architectures") or []).lower()
    hay = f"{model_type} {arch} {folder_name.lower()}"
    if "llada" in hay:
        return FAMILIES["llada"]
    if "dream" in hay:
        return FAMILIES["dream"]
    if "sdar" in hay:
        return FAMILIES["sdar"]
    if "fast_dllm" in hay or "fast-dllm" in hay:
        return FAMILIES["fast_dllm_v2"]
    return FAMILIES["ar"]
