"""Self-distillation data: the AR teacher (SmolLM2-135M-Instruct, greedy) answers each prompt.

The teacher runs on our own engine in AR mode (block size 1), batched: one forward per step
for the whole batch. Tool turns get their synthetic, schema-valid call as the target instead.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from tqdm import tqdm

from engine.api import Engine
from engine.runtime.sequence import DecodeParams
from engine.text.chat_format import THINK_CLOSE, tool_call_text
from engine.train.prompts import read_jsonl, tools_for, write_jsonl


def prompt_and_prefix(eng: Engine, s: dict) -> tuple[str, str]:
    """The student's prompt (ends at the assistant header, or `<think>\\n`) and the forced part of the
    target that precedes the teacher's words (the reasoning note)."""
    tools = tools_for_dict(s)
    thinking = s.get("think") is not None
    prompt = eng.chat_format.render(s["messages"], tools, thinking=thinking)
    prefix = f"{s['think']}\n{THINK_CLOSE}\n\n" if thinking else ""
    return prompt, prefix


def tools_for_dict(s: dict) -> list[dict]:
    from engine.train.prompts import Sample

    return tools_for(Sample(**{k: s[k] for k in ("id", "category", "messages", "tools_scenario", "think", "tool_call")}))


def trim_answer(text: str, finished: bool) -> str:
    text = text.strip()
    if not finished:  # cut an unfinished answer at its last sentence end: voice answers are short
        m = list(re.finditer(r"[.!?](\s|$)", text))
        if m:
            text = text[: m[-1].end()].strip()
    return text


def clean_answer(text: str) -> str:
    """The teacher's first paragraph, without repeated sentences: a 135M teacher often loops
    ("I'm glad to hear that. I'm glad to hear that. ...") and a voice answer is one paragraph."""
    if text.lstrip().startswith("<tool_call>"):
        return text.strip()
    para = text.strip().split("\n\n")[0].strip()
    out, seen = [], set()
    for sent in re.split(r"(?<=[.!?])\s+", para):
        key = sent.strip().lower()
        if key and key not in seen:
            seen.add(key)
            out.append(sent.strip())
    return " ".join(out)


def clean_target(rec: dict) -> str:
    """The record's training target with a cleaned teacher answer (reasoning note kept)."""
    ans = rec["teacher_answer"]
    prefix = rec["target"][: len(rec["target"]) - len(ans) - len("<|im_end|>")]
    return prefix + clean_answer(ans) + "<|im_end|>"


def generate(eng: Engine, samples: list[dict], max_new: int = 48, batch: int = 16, out: Path | None = None) -> list[dict]:
    tok = eng.tokenizer
    results: list[dict] = []
    done_ids = set()
    if out and out.exists():
        results = [json.loads(x) for x in out.read_text().splitlines() if x.strip()]
        done_ids = {r["id"] for r in results}
    todo = [s for s in samples if s["id"] not in done_ids]
    n_tok, t0 = 0, time.perf_counter()
    bar = tqdm(total=len(samples), initial=len(done_ids), desc="teacher", unit="prompt")
    fh = out.open("a") if out else None
    for i in range(0, len(todo), batch):
        chunk = todo[i : i + batch]
        chat = [s for s in chunk if not s.get("tool_call")]
        texts: dict[str, tuple[str, bool]] = {}
        if chat:
            reqs = []
            for s in chat:
                prompt, prefix = prompt_and_prefix(eng, s)
                ids = tok.encode(prompt + prefix, add_special_tokens=False).ids
                params = DecodeParams(block_size=1, threshold=1.0, max_steps_per_block=1, max_tokens=max_new)
                reqs.append(eng.request_for_tokens(ids, params))
            for s, q, res in zip(chat, reqs, eng.generate(reqs), strict=True):
                n_tok += len(q.state.generated)
                texts[s["id"]] = (res.raw_text, q.state.finish_reason == "stop")
        for s in chunk:
            prompt, prefix = prompt_and_prefix(eng, s)
            if s.get("tool_call"):
                answer = tool_call_text({"function": s["tool_call"]})
            else:
                answer = trim_answer(*texts[s["id"]])
            rec = dict(s, prompt=prompt, target=prefix + answer + "<|im_end|>", teacher_answer=answer)
            results.append(rec)
            if fh:
                fh.write(json.dumps(rec) + "\n")
                fh.flush()
        bar.update(len(chunk))
        bar.set_postfix(tok_s=f"{n_tok / (time.perf_counter() - t0):.0f}")
    bar.close()
    if fh:
        fh.close()
    return results


def build_corpus(out_dir: Path, n_train: int, n_heldout: int, seed: int, max_new: int, batch: int) -> None:
    from engine.train.prompts import build_samples

    out_dir.mkdir(parents=True, exist_ok=True)
    samples = build_samples(n_train + n_heldout, seed=seed)
    # Distinct prompts only, then a fixed split: held-out prompts are never trained on.
    seen, uniq = set(), []
    for s in samples:
        key = json.dumps(s.messages)
        if key not in seen:
            seen.add(key)
            uniq.append(s)
    held, train = uniq[:n_heldout], uniq[n_heldout:]
    write_jsonl(train, out_dir / "prompts_train.jsonl")
    write_jsonl(held, out_dir / "prompts_heldout.jsonl")
    eng = Engine.load("smollm2-base")
    generate(eng, read_jsonl(out_dir / "prompts_heldout.jsonl"), max_new, batch, out_dir / "heldout.jsonl")
    generate(eng, read_jsonl(out_dir / "prompts_train.jsonl"), max_new, batch, out_dir / "train.jsonl")
