"""Specialise the generalist adapter on one pack: its corpus, a time-boxed LoRA fit started from
the shipped adapter, the pack's own adapter, and a simulate run of the pack's held-out callers.

    result = specialise(scenario, SpecialiseConfig(budget_min=120, run=Path("runs/train/hotel")))

Every stage is resumable: the corpus is kept once written, the fit resumes from `run/ckpt.pt`
(a stop checkpoints first), and the budget counts training minutes across resumes. Every
`eval_every_min` the adapter so far is exported (`run/adapters/min<M>.safetensors`) and, with
`curve`, its held-out success measured: the curve of success against minutes, which starts with the
adapter training starts from. The best measured adapter is installed; none when the start stays best.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from voice_agent.corpus.build import build_corpus
from voice_agent.packs.adapter import ADAPTER_FILE
from voice_agent.scenarios import Scenario

# What a specialisation corpus adds beside the pack: a few synthetic scenarios keep the call's
# general shape (the generalist's) from being forgotten.
SYNTHETIC_SHARE_SCENARIOS = 30


@dataclass
class SpecialiseConfig:
    run: Path
    budget_min: float = 120.0
    calls: int = 2000
    start_adapter: str | None = ""      # "" = the shipped default adapter; None = a fresh LoRA
    eval_every_min: float = 30.0
    curve: bool = True
    callers: Path | None = None         # the held-out callers to measure on (default: the pack's)
    install: bool = True                # copy the final adapter into the pack folder
    threads: int = 1
    lr: float = 2e-4
    seed: int = 0
    log: Callable[[str], None] = print
    base: str = "smollm2"               # the base the adapter is for (tests: a tiny HF folder)
    rank: int = 16
    max_len: int = 1400                 # prompt + 3 x answer tokens; longer records are skipped
    measure: Callable[[Scenario, Path, Path, Path, int], dict] | None = None  # default: `measure` below
    curve_points: list[dict] = field(default_factory=list)


def corpus_dir(cfg: SpecialiseConfig) -> Path:
    return cfg.run / "corpus"


def ensure_corpus(scenario: Scenario, cfg: SpecialiseConfig) -> dict:
    """The pack's corpus (and a few synthetic scenarios), written once; a rerun reuses it."""
    stats_file = corpus_dir(cfg) / "stats.json"
    if stats_file.is_file():
        cfg.log(f"corpus: reusing {corpus_dir(cfg)}")
        return json.loads(stats_file.read_text())
    cfg.log(f"corpus: {cfg.calls} scripted calls of {scenario.name} (+{SYNTHETIC_SHARE_SCENARIOS} synthetic scenarios)")
    pack = str(scenario.folder) if scenario.folder else scenario.name
    return build_corpus(corpus_dir(cfg), [pack], cfg.calls, SYNTHETIC_SHARE_SCENARIOS, 5, seed=cfg.seed,
                        heldout_calls=10, allow_unseen=True)


def held_out_callers(scenario: Scenario, cfg: SpecialiseConfig) -> Path | None:
    if cfg.callers:
        return cfg.callers
    folder = scenario.callers_dir
    if folder is None:
        return None
    for name in ("heldout.yaml", "handwritten.yaml"):
        if (folder / name).is_file():
            return folder / name
    files = sorted(folder.glob("*.yaml"))
    return files[0] if files else None


def fit_until(cfg: SpecialiseConfig, minutes: float) -> dict:
    """Train (resuming) until the run's total training time reaches `minutes`."""
    from engine import DEFAULT_ADAPTER, TrainConfig
    from engine import fit_adapter as fit

    start = "" if cfg.start_adapter is None else cfg.start_adapter or str(DEFAULT_ADAPTER)
    tc = TrainConfig(data=corpus_dir(cfg), run=cfg.run / "fit", rank=cfg.rank, alpha=2.0 * cfg.rank, lr=cfg.lr,
                     warmup=10, accum=4, block_sizes="4,4,8", max_len=cfg.max_len, max_minutes=minutes, ckpt_minutes=5.0,
                     seed=cfg.seed, threads=cfg.threads, init_adapter=start, base=cfg.base)
    return fit(tc)


def trained_minutes(cfg: SpecialiseConfig) -> float:
    ck = cfg.run / "fit" / "log.jsonl"
    if not ck.is_file():
        return 0.0
    lines = ck.read_text().splitlines()
    try:
        return float(json.loads(lines[-1])["elapsed_s"]) / 60 if lines else 0.0
    except (ValueError, KeyError):
        return 0.0


def export_adapter(cfg: SpecialiseConfig, minutes: float) -> Path:
    from engine import export_adapter as export

    out = cfg.run / "adapters" / f"min{round(minutes):03d}.safetensors"
    export(cfg.run / "fit", out, block_size=4, extra={"specialised_on": str(cfg.run)})
    return out


def measure(scenario: Scenario, adapter: Path, callers: Path, out: Path, threads: int) -> dict:
    """The pack's held-out callers through `voice-agent simulate`'s turn logic with `adapter`."""
    from engine import Engine
    from voice_agent.simulate.batch import simulate
    from voice_agent.simulate.callfile import load_callfile
    from voice_agent.simulate.runner import RunOptions

    calls = load_callfile(callers)
    engine = Engine.load("default", threads=threads, adapter=str(adapter))
    opts = RunOptions(scenario=scenario.name, engine_threads=threads)
    summary = simulate(calls, scenario, engine, opts, out_dir=out, progress=False)
    return {k: summary.get(k) for k in ("calls", "task_success_rate", "policy_share", "ttfat_ms_p50",
                                         "tokens_per_forward")}


def specialise(scenario: Scenario, cfg: SpecialiseConfig) -> dict:
    t0 = time.time()
    cfg.run.mkdir(parents=True, exist_ok=True)
    stats = ensure_corpus(scenario, cfg)
    callers = held_out_callers(scenario, cfg)
    curve_file = cfg.run / "curve.json"
    cfg.curve_points = json.loads(curve_file.read_text()) if curve_file.is_file() else []
    done = trained_minutes(cfg)
    if done:
        cfg.log(f"fit: resuming at {done:.1f} of {cfg.budget_min:g} training minutes")
    measure_fn = cfg.measure or measure
    if cfg.curve and callers and not any(p["minutes"] == 0 for p in cfg.curve_points):
        start = _start_adapter(cfg)  # what the pack runs on without training: the bar to beat
        cfg.curve_points.insert(0, {"minutes": 0.0, "adapter": str(start),
                                    **measure_fn(scenario, start, callers, cfg.run / "simulate_min000", cfg.threads)})
        curve_file.write_text(json.dumps(cfg.curve_points, indent=1))
        cfg.log(f"held-out success before training: {cfg.curve_points[0]['task_success_rate']:.3f} ({callers.name})")
    stops = [m for m in _stops(cfg.budget_min, cfg.eval_every_min) if m > done + 0.01]
    adapter = None
    for stop in stops:
        fit_until(cfg, stop)
        done = trained_minutes(cfg)
        if done < stop - 0.01:  # stopped early (Ctrl-C / SIGTERM): the checkpoint is saved; resume later
            cfg.log(f"fit: stopped at {done:.1f} min; run the same command again to resume")
            return {"stopped": True, "trained_min": round(done, 1)}
        adapter = export_adapter(cfg, done)
        if cfg.curve and callers:
            point = {"minutes": round(done, 1), "adapter": str(adapter), **measure_fn(
                scenario, adapter, callers, cfg.run / f"simulate_min{round(done):03d}", cfg.threads)}
            cfg.curve_points.append(point)
            curve_file.write_text(json.dumps(cfg.curve_points, indent=1))
            cfg.log(f"held-out success after {done:.0f} min: {point['task_success_rate']:.3f} ({callers.name})")
    if adapter is None:  # the budget was trained already: the last export stands
        exported = sorted((cfg.run / "adapters").glob("min*.safetensors"))
        adapter = exported[-1] if exported else export_adapter(cfg, done)
    final = best_point(cfg.curve_points)
    if final is None and callers:
        final = {"minutes": round(done, 1), "adapter": str(adapter), **measure_fn(
            scenario, adapter, callers, cfg.run / "simulate_final", cfg.threads)}
    elif final is not None:
        adapter = Path(final.get("adapter") or cfg.run / "adapters" / f"min{round(final['minutes']):03d}.safetensors")
    installed = None
    if final is not None and final["minutes"] == 0:  # no export beat the adapter it started from
        cfg.log("no trained adapter beat the one it started from: nothing installed")
    elif cfg.install and scenario.folder:
        installed = scenario.folder / ADAPTER_FILE
        installed.write_bytes(adapter.read_bytes())
    return {"scenario": scenario.name, "corpus_records": stats.get("train_records"), "trained_min": round(done, 1),
            "wall_min": round((time.time() - t0) / 60, 1), "adapter": str(adapter),
            "installed": str(installed) if installed else None, "final": final, "curve": cfg.curve_points}


def best_point(curve: list[dict]) -> dict | None:
    """The measured adapter to keep: the highest held-out success; a tie goes to the one trained
    longest (it decodes more tokens a pass), and the untrained start only when nothing beat it."""
    return max(curve, key=lambda p: (p["task_success_rate"], p["minutes"] > 0, p["minutes"])) if curve else None


def _start_adapter(cfg: SpecialiseConfig) -> Path:
    from engine import DEFAULT_ADAPTER

    return Path(cfg.start_adapter) if cfg.start_adapter else DEFAULT_ADAPTER


def _stops(budget: float, every: float) -> list[float]:
    """Training minutes at which to export (and measure): every `every` minutes, and the budget."""
    out, m = [], every
    while every > 0 and m < budget - 0.01:
        out.append(m)
        m += every
    return out + [budget]


__all__ = ["SpecialiseConfig", "specialise"]
