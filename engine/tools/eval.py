"""python -m engine.tools.eval: how good is the shipped default dLLM, on held-out prompts.

Quality (batched, all held-out prompts, at --effort, default `low`):
  rouge_l_vs_teacher  ROUGE-L F1 of the answer against the AR teacher's (cleaned) answer
  rouge_l_vs_own_ar   against the same merged weights decoded one token at a time
  rouge_l_own_ar_vs_teacher  that AR decoding against the teacher (training drift, parallelism aside)
  repeat_rate         adjacent duplicate tokens per committed token, minus the teacher's rate
  tool_call_valid_rate  parsed, known tool, schema-valid arguments, on held-out tool turns
                      (tool calls are schema-guided as served; --no-tool-guide measures the raw model)
  tool_name_match_rate / tool_args_exact_rate  the target function / and exactly its arguments
  tokens_per_forward  model-decoded tokens / forward passes (infilled skeleton tokens not counted)
Speed (batch 1, --speed-prompts prompts, same run, same weights):
  speedup_vs_ar       diffusion decode tok/s / AR decode tok/s
A per-effort table is printed above the final JSON line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import torch
from tqdm import tqdm

from engine.api import Engine, Request
from engine.model.precision import PRECISIONS
from engine.runtime.effort import EFFORTS
from engine.text.tool_calls import parse_tool_calls

HELDOUT = Path(__file__).resolve().parents[1] / "weights" / "heldout.jsonl.gz"


def load_heldout(path: Path = HELDOUT) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def rouge_l(a: str, b: str) -> float:
    x, y = a.lower().split(), b.lower().split()
    if not x or not y:
        return float(x == y)
    prev = [0] * (len(y) + 1)
    for xi in x:
        cur = [0]
        for j, yj in enumerate(y):
            cur.append(prev[j] + 1 if xi == yj else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(x), lcs / len(y)
    return 2 * p * r / (p + r)


def repeats(ids: list[int]) -> tuple[int, int]:
    return sum(1 for a, b in zip(ids, ids[1:], strict=False) if a == b), max(len(ids), 1)


def tools_of(rec: dict) -> list[dict]:
    from engine.train.prompts import load_scenario_tools

    return load_scenario_tools(rec["tools_scenario"])[1] if rec.get("tools_scenario") else []


def decode_pair(eng: Engine, other: Engine, recs: list[dict], effort: str, max_tokens: int) -> tuple[list[Request], list[Request]]:
    """Decode many prompts in one batch with two engines (diffusion and AR on the same weights, or
    two precisions), each through the decode loop (`Engine.generate`); each request's `result` is set."""
    out = []
    for e in (eng, other):
        reqs = [e.prepare(r["messages"], tools=tools_of(r), reasoning_effort=effort, max_tokens=max_tokens)
                for r in recs]
        for q, res in zip(reqs, e.generate(reqs), strict=True):
            q.result = res
        out.append(reqs)
    return out[0], out[1]


def quality(eng: Engine, ar: Engine, recs: list[dict], effort: str, max_tokens: int, batch: int,
            desc: str) -> dict:
    from engine.train.teacher import clean_answer

    r_teacher, r_own, r_ar_teacher, tool_ok, tool_n, tool_name, tool_exact = [], [], [], 0, 0, 0, 0
    rep_s = rep_t = rep_teacher = 0
    tok = fwd = 0
    for i in tqdm(range(0, len(recs), batch), desc=desc, unit="batch"):
        chunk = recs[i : i + batch]
        d, a = decode_pair(eng, ar, chunk, effort, max_tokens)
        for rec, qd, qa in zip(chunk, d, a, strict=True):
            tok += len(qd.state.generated) - qd.state.infilled  # decoded by the model, not infilled
            fwd += qd.state.forward_passes
            if rec.get("tool_call"):
                tool_n += 1
                parsed = parse_tool_calls(qd.prefix + qd.parser.tool_text, tools_of(rec)) if qd.parser.tool_text else None
                ok = bool(parsed and parsed.calls and not parsed.errors)
                tool_ok += ok
                if ok:  # valid is not enough: is it the call the turn asked for?
                    call = parsed.calls[0]["function"]
                    tool_name += call["name"] == rec["tool_call"]["name"]
                    tool_exact += (call["name"] == rec["tool_call"]["name"]
                                   and json.loads(call["arguments"]) == rec["tool_call"]["arguments"])
                continue
            teacher = clean_answer(rec["teacher_answer"])
            r_teacher.append(rouge_l(qd.result.text, teacher))
            r_own.append(rouge_l(qd.result.text, qa.result.text))
            r_ar_teacher.append(rouge_l(qa.result.text, teacher))
            ans_ids = eng.tokenizer.encode(qd.result.text, add_special_tokens=False).ids
            t_ids = eng.tokenizer.encode(teacher, add_special_tokens=False).ids
            n_r, n = repeats(ans_ids)
            rep_s += n_r
            rep_t += n
            rep_teacher += repeats(t_ids)[0] / repeats(t_ids)[1] * n
    sums = {"tok": tok, "fwd": fwd, "r_teacher": sum(r_teacher), "r_own": sum(r_own), "n_chat": len(r_teacher),
            "r_ar_teacher": sum(r_ar_teacher),
            "tool_ok": tool_ok, "tool_n": tool_n, "tool_name": tool_name, "tool_exact": tool_exact, "rep_s": rep_s, "rep_t": rep_t, "rep_teacher": rep_teacher,
            "n_prompts": len(recs)}
    return summarize(sums)


def summarize(sums: dict) -> dict:
    """Quality metrics from raw sums (so shards of one evaluation can be merged exactly)."""
    n_chat = sums["n_chat"]
    return {
        "tokens_per_forward": round(sums["tok"] / max(sums["fwd"], 1), 3),
        "rouge_l_vs_teacher": round(sums["r_teacher"] / n_chat, 4) if n_chat else None,
        "rouge_l_vs_own_ar": round(sums["r_own"] / n_chat, 4) if n_chat else None,
        # The same weights decoded AR, against the teacher: what training changed, parallelism aside.
        "rouge_l_own_ar_vs_teacher": round(sums.get("r_ar_teacher", 0) / n_chat, 4) if n_chat else None,
        "repeat_rate": round(max(0.0, (sums["rep_s"] - sums["rep_teacher"]) / max(sums["rep_t"], 1)), 4),
        "tool_call_valid_rate": round(sums["tool_ok"] / sums["tool_n"], 4) if sums["tool_n"] else None,
        # Of all tool turns: the right function; the right function with exactly the target arguments.
        "tool_name_match_rate": round(sums.get("tool_name", 0) / sums["tool_n"], 4) if sums["tool_n"] else None,
        "tool_args_exact_rate": round(sums.get("tool_exact", 0) / sums["tool_n"], 4) if sums["tool_n"] else None,
        "n_prompts": sums["n_prompts"],
        "n_tool_prompts": sums["tool_n"],
        "sums": sums,
    }


def merge(paths: list[Path]) -> dict:
    """Combine the JSON lines of `--shard` runs into one result (quality from summed counts,
    speed from the first shard)."""
    parts = [json.loads(Path(p).read_text().strip().splitlines()[-1]) for p in paths]
    keys = parts[0]["sums"].keys()
    total = summarize({k: sum(p["sums"].get(k, 0) for p in parts) for k in keys})
    out = dict(parts[0])
    out.update(total)
    out["shards"] = len(parts)
    return out


def agreement(eng: Engine, other: Engine, recs: list[dict], effort: str, max_tokens: int, batch: int,
              desc: str) -> dict:
    """The same weights at two precisions (e.g. int8 against bf16), decoded the same way: ROUGE-L F1 of
    their answers on the chat turns; on the tool turns, how often both do the same (the same calls
    with the same arguments, or both no call) and how many calls each made."""
    rouge, same, made, made_other, n_tool = [], 0, 0, 0, 0
    for i in tqdm(range(0, len(recs), batch), desc=desc, unit="batch"):
        chunk = recs[i : i + batch]
        mine, theirs = decode_pair(eng, other, chunk, effort, max_tokens)
        for rec, qa, qb in zip(chunk, mine, theirs, strict=True):
            a, b = qa.result, qb.result
            if rec.get("tool_call"):
                n_tool += 1
                made, made_other = made + bool(a.tool_calls), made_other + bool(b.tool_calls)
                same += [c["function"] for c in a.tool_calls] == [c["function"] for c in b.tool_calls]
            else:
                rouge.append(rouge_l(a.text, b.text))
    return {
        "rouge_l": round(sum(rouge) / len(rouge), 4) if rouge else None,
        "same_tool_behaviour_rate": round(same / n_tool, 4) if n_tool else None,
        "tool_turns_with_a_call": made,
        "tool_turns_with_a_call_against": made_other,
        "n_chat": len(rouge),
        "n_tool": n_tool,
    }


def speed(eng: Engine, ar: Engine, recs: list[dict], effort: str, max_tokens: int) -> dict:
    """Batch-1 decode speed, diffusion vs AR, interleaved per prompt so machine noise hits both."""
    dt = at = dn = an = 0.0
    ttfat = []
    for rec in recs:
        kw = dict(tools=tools_of(rec), reasoning_effort=effort, max_tokens=max_tokens)
        rd = eng.chat(rec["messages"], **kw)
        ra = ar.chat(rec["messages"], **kw)
        dt += rd.metrics["decode_ms"]
        dn += rd.metrics["completion_tokens"]
        at += ra.metrics["decode_ms"]
        an += ra.metrics["completion_tokens"]
        if rd.metrics["ttfat_ms"] is not None:
            ttfat.append(rd.metrics["ttfat_ms"])
    d_tok_s, a_tok_s = dn / max(dt / 1000, 1e-9), an / max(at / 1000, 1e-9)
    ttfat.sort()
    return {
        "decode_tok_s": round(d_tok_s, 2),
        "ar_decode_tok_s": round(a_tok_s, 2),
        "speedup_vs_ar": round(d_tok_s / max(a_tok_s, 1e-9), 3),
        "ttfat_ms_p50_cold": ttfat[len(ttfat) // 2] if ttfat else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.tools.eval", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default")
    p.add_argument("--adapter", default=None, help="evaluate this adapter instead of the shipped one")
    p.add_argument("--heldout", type=Path, default=HELDOUT)
    p.add_argument("--effort", default="low", help="the effort of the headline numbers")
    p.add_argument("--table-efforts", default=",".join(EFFORTS), help="efforts of the table above the JSON")
    p.add_argument("--table-prompts", type=int, default=32, help="held-out prompts per table row")
    p.add_argument("--limit", type=int, default=0, help="use only the first N held-out prompts (0 = all)")
    p.add_argument("--speed-prompts", type=int, default=12)
    p.add_argument("--max-tokens", type=int, default=96, help="reasoning + answer tokens")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--block-size", type=int, default=0, help="override the adapter's block size")
    p.add_argument("--threshold", type=float, default=None, help="override the effort's threshold")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--precision", default=None, choices=PRECISIONS,
                   help="weights and activations (default: $VOICE_AGENT_PRECISION, else auto)")
    p.add_argument("--against-precision", default="", metavar="P[,Q]",
                   help="also decode the prompts at precision P (and Q...) and report how closely --precision agrees "
                        "with each (ROUGE-L of the answers, the same tool behaviour), e.g. --precision int8 "
                        f"--against-precision bf16,fp32; one of {', '.join(PRECISIONS)}")
    p.add_argument("--no-tool-guide", action="store_true",
                   help="let the model write tool calls unguided (default: schema-guided, as served)")
    p.add_argument("--tool-prompts-only", action="store_true", help="evaluate only the held-out tool turns")
    p.add_argument("--shard", default="", help="K/N: evaluate every N-th held-out prompt from K (run N in parallel)")
    p.add_argument("--merge", nargs="+", type=Path, help="merge the --json outputs of shard runs and print the result")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    against = [x.strip() for x in a.against_precision.split(",") if x.strip()]
    for name in against:
        if name not in PRECISIONS:
            p.error(f"--against-precision: {name!r} is not one of {', '.join(PRECISIONS)}")
    if a.merge:
        print(json.dumps(merge(a.merge)))
        return 0
    if a.threads:
        torch.set_num_threads(a.threads)
    eng = Engine.load(a.model, adapter=a.adapter, block_size=a.block_size or None, precision=a.precision)
    if a.threshold is not None:
        from engine.runtime import effort as eff_mod

        for k, v in list(eff_mod.EFFORTS.items()):
            eff_mod.EFFORTS[k] = type(v)(v.thinking_budget, a.threshold, v.steps_per_block)
    eng.guided_tools = not a.no_tool_guide
    ar = eng.variant(family="ar")
    recs = load_heldout(a.heldout)
    if a.tool_prompts_only:
        recs = [r for r in recs if r.get("tool_call")]
    if a.limit:
        recs = recs[: a.limit]
    if a.shard:
        k, n = (int(x) for x in a.shard.split("/"))
        recs = recs[k::n]
    t0 = time.time()
    table = {}
    for eff in [e for e in a.table_efforts.split(",") if e and e != a.effort]:
        table[eff] = quality(eng, ar, recs[: a.table_prompts], eff, a.max_tokens, a.batch, f"table {eff}")
    head = quality(eng, ar, recs, a.effort, a.max_tokens, a.batch, f"eval {a.effort}")
    table[a.effort] = dict(head)
    versus = []
    for name in against:
        other = Engine.load(a.model, adapter=a.adapter, block_size=a.block_size or None, precision=name)
        other.guided_tools = eng.guided_tools
        v = {"precision": other.info.get("precision"),
             **agreement(eng, other, recs, a.effort, a.max_tokens, a.batch, f"vs {name}")}
        del other
        versus.append(v)
        print(f"{eng.info.get('precision')} vs {v['precision']} at {a.effort}: ROUGE-L {v['rouge_l']} "
              f"({v['n_chat']} chat turns); the same tool behaviour on {v['same_tool_behaviour_rate']} of "
              f"{v['n_tool']} tool turns (a call made on {v['tool_turns_with_a_call']} vs "
              f"{v['tool_turns_with_a_call_against']})")
    spd = speed(eng, ar, recs[: a.speed_prompts], a.effort, a.max_tokens)
    inst = speed(eng, ar, [r for r in recs if not r.get("tool_call")][: a.speed_prompts], "instant", a.max_tokens)
    print(f"{'effort':8s} {'tok/fwd':>8s} {'rougeL/teacher':>15s} {'rougeL/ownAR':>13s} {'repeat':>7s} {'tool ok':>8s} {'n':>4s}")
    for eff in EFFORTS:
        if eff in table:
            r = table[eff]
            print(f"{eff:8s} {r['tokens_per_forward']:8.2f} {r['rouge_l_vs_teacher'] or 0:15.3f} "
                  f"{r['rouge_l_vs_own_ar'] or 0:13.3f} {r['repeat_rate']:7.3f} {r['tool_call_valid_rate'] or 0:8.2f} {r['n_prompts']:4d}")
    print(f"speed at {a.effort}: diffusion {spd['decode_tok_s']} tok/s vs AR {spd['ar_decode_tok_s']} tok/s "
          f"= {spd['speedup_vs_ar']}x; at instant: {inst['speedup_vs_ar']}x")
    out = {
        "model": eng.model_name,
        "adapter": eng.info.get("adapter", {}),
        "reasoning_effort": a.effort,
        "tool_guide": not a.no_tool_guide,
        "precision": eng.info.get("precision"),
        "against_precision": versus,
        "block_size": eng.family.block_size,
        **head,
        **spd,
        "shard": a.shard or None,
        "instant": {"tokens_per_forward": table.get("instant", {}).get("tokens_per_forward"), **inst},
        "by_effort": table,
        "eval_minutes": round((time.time() - t0) / 60, 1),
    }
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    from engine.errors import run_tool

    raise SystemExit(run_tool(main, "python -m engine.tools.eval"))
