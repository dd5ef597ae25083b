"""Load benchmark: N concurrent `openai` SDK clients, each one phone call of streaming voice-agent
turns (the dental receptionist scenario), for N in 1, 2, 4, 8, 16.

Per N it prints aggregate completion tok/s, per-request TTFAT (first answer token, measured by
the client) p50/p95, TTFT p50 and errors. `--json` prints the table as JSON on the last line.
Without --base-url it starts its own server on 127.0.0.1 in a subprocess.

    python -m engine.tools.loadtest --max-tokens 48 --threads 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from engine.errors import EngineError

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "dental_clinic" / "scenario.yaml"
# What callers say: test data for the benchmark, one list per simulated call (rotated by call).
CALLER_TURNS = [
    ["Hi, I'd like to book a cleaning for next Tuesday.", "Great, does ten in the morning work?"],
    ["Hello, this is Dana Lee. When is my next appointment?", "Can we move it to Friday afternoon?"],
    ["I need to cancel my appointment, my name is Sam Ortiz.", "Yes, please cancel it."],
    ["Are you open on Saturdays?", "Okay, what about Monday at nine?"],
    ["My tooth really hurts, can I come in today?", "Anything after three is fine."],
    ["Hi, do you do teeth whitening?", "How long does it take?"],
]


@dataclass
class TurnResult:
    ok: bool
    ttfat_ms: float | None = None
    ttft_ms: float | None = None
    total_ms: float = 0.0
    completion_tokens: int = 0
    error: str = ""


@dataclass
class Phase:
    n: int
    turns: list[TurnResult] = field(default_factory=list)
    wall_s: float = 0.0
    mean_batch: float = 0.0

    def row(self) -> dict:
        ok = [t for t in self.turns if t.ok]
        ttfat = [t.ttfat_ms for t in ok if t.ttfat_ms is not None]
        ttft = [t.ttft_ms for t in ok if t.ttft_ms is not None]
        tokens = sum(t.completion_tokens for t in ok)
        return {
            "n": self.n,
            "requests": len(self.turns),
            "errors": len(self.turns) - len(ok),
            "completion_tokens": tokens,
            "wall_s": round(self.wall_s, 2),
            "agg_tok_s": round(tokens / self.wall_s, 2) if self.wall_s else 0.0,
            "ttfat_p50_ms": _pct(ttfat, 50),
            "ttfat_p95_ms": _pct(ttfat, 95),
            "ttfat_n": len(ttfat),
            "ttft_p50_ms": _pct(ttft, 50),
            "ttfat_under_500ms": round(sum(x <= 500 for x in ttfat) / len(ttfat), 3) if ttfat else None,
            "mean_batch": round(self.mean_batch, 2),
            "error_samples": sorted({t.error for t in self.turns if not t.ok})[:3],
        }


def _pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    if len(xs) == 1:
        return round(xs[0], 1)
    return round(statistics.quantiles(xs, n=100, method="inclusive")[int(p) - 1], 1)


def load_scenario(path: Path = SCENARIO) -> tuple[str, list[dict]]:
    data = yaml.safe_load(path.read_text())
    tools = [{"type": "function", "function": t} for t in data.get("tools") or []]
    return data["system_prompt"], tools


# -- one simulated call ------------------------------------------------------------------------
async def run_call(client, model: str, call_no: int, turns: int, max_tokens: int, effort: str,
                   system: str, tools: list[dict]) -> list[TurnResult]:
    call_id = f"loadtest-{uuid.uuid4().hex[:12]}"
    lines = CALLER_TURNS[call_no % len(CALLER_TURNS)]
    messages: list[dict] = [{"role": "system", "content": system}]
    out = []
    for i in range(turns):
        messages.append({"role": "user", "content": lines[i % len(lines)]})
        r, reply = await one_turn(client, model, messages, call_id, max_tokens, effort, tools)
        out.append(r)
        if not r.ok:
            break
        messages.append({"role": "assistant", "content": reply})
    return out


async def one_turn(client, model, messages, call_id, max_tokens, effort, tools) -> tuple[TurnResult, str]:
    t0 = time.perf_counter()
    r = TurnResult(ok=False)
    text, finish = [], None
    try:
        stream = await client.chat.completions.create(
            model=model, messages=messages, tools=tools or None, stream=True, max_tokens=max_tokens,
            reasoning_effort=effort, stream_options={"include_usage": True},
            extra_headers={"X-Session-Id": call_id})
        async for chunk in stream:
            now = (time.perf_counter() - t0) * 1000
            if chunk.usage is not None:
                r.completion_tokens = chunk.usage.completion_tokens
            if not chunk.choices:
                continue
            ch = chunk.choices[0]
            delta = ch.delta
            reasoning = getattr(delta, "reasoning_content", None)
            if (delta.content or reasoning) and r.ttft_ms is None:
                r.ttft_ms = now
            if delta.content:
                if r.ttfat_ms is None:
                    r.ttfat_ms = now
                text.append(delta.content)
            if ch.finish_reason:
                finish = ch.finish_reason
        r.ok = finish is not None
        if not r.ok:
            r.error = "stream ended without a finish_reason"
    except Exception as e:  # every failure is counted, never raised: this is a benchmark
        r.error = f"{type(e).__name__}: {str(e)[:160]}"
    r.total_ms = (time.perf_counter() - t0) * 1000
    return r, "".join(text)


async def run_phase(base_url: str, api_key: str, model: str, n: int, turns: int, max_tokens: int,
                    effort: str, system: str, tools: list[dict], timeout: float) -> Phase:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url + "/v1", api_key=api_key or "none", timeout=timeout, max_retries=0)
    before = _health(base_url)
    t0 = time.perf_counter()
    calls = await asyncio.gather(*(run_call(client, model, i, turns, max_tokens, effort, system, tools)
                                   for i in range(n)))
    phase = Phase(n, [t for c in calls for t in c], time.perf_counter() - t0)
    after = _health(base_url)
    steps = after.get("steps", 0) - before.get("steps", 0)
    if steps > 0:
        phase.mean_batch = (after.get("rows_stepped", 0) - before.get("rows_stepped", 0)) / steps
    await client.close()
    return phase


def _health(base_url: str) -> dict:
    import httpx

    try:
        return httpx.get(base_url + "/health", timeout=10).json()
    except Exception:
        return {}


# -- a server of our own -------------------------------------------------------------------------
class SpawnedServer:
    """`python -m engine.serve.server` in a subprocess on a free loopback port, stopped on exit."""

    def __init__(self, model: str, extra: list[str] | None = None, api_key: str | None = None,
                 log_path: str | None = None) -> None:
        from engine.serve.server import free_port

        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "engine.serve.server", "--host", "127.0.0.1", "--port", str(self.port),
               "--model", model, "--log-level", "warning", *(extra or [])]
        env = dict(os.environ)
        if api_key:
            env["VOICE_AGENT_API_KEY"] = api_key
        # Without a log path the log still goes to a file: a server that exits early is explained by its last line.
        self.log = open(log_path, "w+") if log_path else tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def last_log_line(self) -> str:
        """The server's last log line; read once it has exited (the file's offset is shared with it)."""
        try:
            self.log.flush()
            self.log.seek(0)
            lines = [ln.strip() for ln in self.log.read().splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return lines[-1][:400] if lines else ""

    def wait_ready(self, timeout: float = 300) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                last = self.last_log_line()
                raise EngineError(f"the server exited with code {self.proc.returncode}{': ' + last if last else ''}",
                                  code="server_start_failed")
            try:
                if httpx.get(self.base_url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise EngineError(f"the server did not become ready in {timeout:.0f} s", code="server_start_failed")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> SpawnedServer:
        # SIGTERM must unwind through stop(), or the server would outlive us.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# -- a random-weight model folder (tests, and real-size configs on a GPU box) ---------------------
def write_random_model(folder: str | Path, dim: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                       intermediate: int = 128, family: str | None = "smollm2-dllm", seed: int = 0,
                       tokenizer_from: str | Path | None = None) -> Path:
    """An HF-style folder (config.json, model.safetensors, tokenizer.json) with random weights and
    the SmolLM2 tokenizer (vocab 49152). Untied embeddings, so its output is varied text."""
    from safetensors.torch import save_file

    from engine.model.loading import smollm2_folder
    from engine.model.transformer import ModelConfig, Transformer, init_random

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = ModelConfig(vocab_size=49152, dim=dim, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads,
                      intermediate_size=intermediate, tie_embeddings=False, max_seq_len=4096)
    model = Transformer(cfg)
    init_random(model, seed)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "model.safetensors"))
    conf = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 49152,
            "hidden_size": dim, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": kv_heads, "intermediate_size": intermediate,
            "max_position_embeddings": 4096, "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
    if family:
        conf["dllm_family"] = family
    (folder / "config.json").write_text(json.dumps(conf, indent=2))
    src = Path(tokenizer_from) if tokenizer_from else smollm2_folder() / "tokenizer.json"
    shutil.copy(src, folder / "tokenizer.json")
    return folder


# -- the command (its flags live in engine/serve/tool_args.py) ----------------------------------------
def run(args: argparse.Namespace) -> int:
    system, tools = load_scenario()
    ns = [int(x) for x in str(args.concurrency).split(",") if x.strip()]
    server = None
    model_arg = args.model
    tmp = None
    if args.base_url is None:
        if model_arg.startswith("random-"):
            import tempfile

            dim, layers = (int(x) for x in model_arg[len("random-"):].split("x"))
            tmp = tempfile.mkdtemp(prefix="loadtest-model-")
            model_arg = str(write_random_model(tmp, dim=dim, layers=layers, heads=max(dim // 64, 1),
                                               kv_heads=max(dim // 192, 1), intermediate=dim * 8 // 3))
        extra = ["--max-batch", str(args.max_batch), "--max-queue", "256", "--queue-timeout", str(args.timeout)]
        if args.precision:
            extra += ["--precision", args.precision]
        if args.threads:
            extra += ["--threads", str(args.threads)]
        server = SpawnedServer(model_arg, extra, args.api_key, args.server_log).__enter__()
        base_url = server.base_url
    else:
        base_url = args.base_url.rstrip("/").removesuffix("/v1")
    try:
        return _run_table(args, base_url, system, tools, ns)
    finally:
        if server is not None:
            server.stop()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _run_table(args, base_url: str, system: str, tools: list[dict], ns: list[int]) -> int:
    import httpx

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    models = httpx.get(base_url + "/v1/models", headers=headers, timeout=30).json()
    model = models["data"][0]["id"]
    print(f"load test: {base_url} model {model!r} ({models['data'][0].get('root', '')}); "
          f"{args.turns} streaming turns per call, max_tokens {args.max_tokens}, effort {args.effort}", flush=True)
    # Warm-up: the first request pays one-off costs (allocations, the shared system-prompt prefix).
    asyncio.run(run_phase(base_url, args.api_key, model, 1, 1, 8, args.effort, system, tools, args.timeout))
    rows = []
    hdr = f"{'N':>3} {'reqs':>5} {'errors':>6} {'tokens':>7} {'wall_s':>7} {'tok/s':>7} {'TTFAT p50':>10} " \
          f"{'TTFAT p95':>10} {'TTFT p50':>9} {'batch':>6}"
    print(hdr, flush=True)
    for n in ns:
        phase = asyncio.run(run_phase(base_url, args.api_key, model, n, args.turns, args.max_tokens,
                                      args.effort, system, tools, args.timeout))
        row = phase.row()
        rows.append(row)
        print(f"{n:>3} {row['requests']:>5} {row['errors']:>6} {row['completion_tokens']:>7} {row['wall_s']:>7} "
              f"{row['agg_tok_s']:>7} {_fmt(row['ttfat_p50_ms']):>10} {_fmt(row['ttfat_p95_ms']):>10} "
              f"{_fmt(row['ttft_p50_ms']):>9} {row['mean_batch']:>6}", flush=True)
        for e in row["error_samples"]:
            print(f"    error: {e}")
    by_n = {r["n"]: r for r in rows}
    summary: dict = {"model": model, "max_tokens": args.max_tokens, "effort": args.effort, "turns": args.turns,
                     "rows": rows}
    if 1 in by_n and 8 in by_n and by_n[1]["agg_tok_s"]:
        ratio = by_n[8]["agg_tok_s"] / by_n[1]["agg_tok_s"]
        summary["tok_s_ratio_8_vs_1"] = round(ratio, 2)
        summary["ttfat_p95_ms_at_8"] = by_n[8]["ttfat_p95_ms"]
        target = ratio >= 3 and by_n[8]["errors"] == 0
        summary["target_met"] = target
        print(f"tok/s at N=8 is {ratio:.2f}x N=1 (target >= 3x, zero errors: {'met' if target else 'NOT met'}); "
              f"TTFAT p95 at N=8: {_fmt(by_n[8]['ttfat_p95_ms'])} ms against a 500 ms budget")
    if args.json:
        print(json.dumps(summary))
    return 0 if all(r["errors"] == 0 for r in rows) else 1


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.0f}"


def main(argv: list[str] | None = None) -> int:
    from engine.serve.tool_args import loadtest_arguments

    parser = argparse.ArgumentParser(prog="python -m engine.tools.loadtest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    loadtest_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    from engine.errors import run_tool

    raise SystemExit(run_tool(main, "python -m engine.tools.loadtest"))
