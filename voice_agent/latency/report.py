"""Writing a replay's results: `report.json` (schema in SCHEMA.md / report.schema.json) and
`report.html`, one self-contained page with matplotlib plots embedded as PNG and every call's
audio embedded (Opus, small) next to its transcript."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from voice_agent.latency.metrics import STAGE_LABELS, STAGE_NAMES

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("report.schema.json")
STAGE_COLORS = {
    "vad_stop_ms": "#8da0cb", "stt_ms": "#66c2a5", "turn_ms": "#a6d854", "llm_ms": "#fc8d62",
    "text_aggregation_ms": "#ffd92f", "tts_ttfb_ms": "#e78ac3", "transport_ms": "#e5c494",
    "other_ms": "#b3b3b3",
}
MAX_WATERFALL_TURNS = 80


def build_report(calls: list[dict], summary: dict) -> dict:
    return {"schema_version": SCHEMA_VERSION, "summary": summary, "calls": calls}


def write_report(report: dict, out_dir: Path, *, embed_audio: bool = True) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "report.json"
    json_path.write_text(json.dumps(report, indent=2, default=_jsonable) + "\n", encoding="utf-8")
    html_path = out_dir / "report.html"
    html_path.write_text(render_html(report, out_dir, embed_audio=embed_audio), encoding="utf-8")
    return json_path, html_path


def load_report(path: Path) -> dict:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable report.json ({e})") from e
    if not isinstance(report, dict) or "summary" not in report or "calls" not in report:
        raise ValueError(f"{path}: not a replay report (no summary/calls)")
    return report


def validate(report: dict) -> None:
    """Raise jsonschema.ValidationError when the report does not match the documented schema."""
    import jsonschema

    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return str(v)


# --- plots -----------------------------------------------------------------------------------

def _figure_png(fig) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _scored(report: dict) -> list[tuple[str, dict]]:
    out = []
    for ci, call in enumerate(report["calls"]):
        if call.get("error"):
            continue
        for t in call.get("turns", []):
            if t.get("e2e_ms") is not None:
                out.append((f"{ci + 1}:{Path(call['file']).stem[:18]}#{t['index'] + 1}", t))
    return out


def plot_waterfall(report: dict) -> str | None:
    import matplotlib.pyplot as plt

    turns = _scored(report)[:MAX_WATERFALL_TURNS]
    if not turns:
        return None
    budget = report["summary"]["budget_ms"]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.38 * len(turns)))
    for row, (_, t) in enumerate(turns):
        left = 0.0
        for stage in STAGE_NAMES:
            width = t["breakdown"].get(stage) or 0.0
            if width > 0:
                ax.barh(row, width, left=left, color=STAGE_COLORS[stage], edgecolor="white", linewidth=0.5)
            left += width
        answer = t.get("answer_e2e_ms")
        label = f"{t['e2e_ms']:.0f} ms"
        if answer is not None and answer > t["e2e_ms"] + 1:
            # a filler played first: mark where the answer itself began
            ax.plot([answer], [row], marker="D", color="black", markersize=5)
            label += f" (answer {answer:.0f} ms)"
        ax.text(max(left, answer or 0.0) + 15, row, label, va="center", fontsize=8)
    _budget_line(ax, budget)
    ax.set_yticks(range(len(turns)), [label for label, _ in turns], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms from the true end of the caller's speech to the first bot audio (diamond: the answer's, after a filler)")
    ax.set_title("Per-turn waterfall of the end-to-end latency", pad=16)
    _stage_legend(ax)
    return _figure_png(fig)


def _budget_line(ax, budget: float) -> None:
    ax.axvline(budget, color="#d62728", linestyle="--", linewidth=1.5)
    ax.text(budget, 1.005, f"budget {budget:.0f} ms", color="#d62728", fontsize=8, ha="center",
            va="bottom", transform=ax.get_xaxis_transform())


def _stage_legend(ax) -> None:
    import matplotlib.pyplot as plt

    handles = [plt.Rectangle((0, 0), 1, 1, color=STAGE_COLORS[s]) for s in STAGE_NAMES]
    ax.legend(handles, [STAGE_LABELS[s] for s in STAGE_NAMES], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False)


def plot_cdfs(report: dict) -> str | None:
    import matplotlib.pyplot as plt

    turns = [t for _, t in _scored(report)]
    metrics = ("e2e_ms", "answer_e2e_ms", "ttfat_ms")
    series = {m: np.sort([t[m] for t in turns if t.get(m) is not None]) for m in metrics}
    if not any(len(v) for v in series.values()):
        return None
    budget = report["summary"]["budget_ms"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(14, 3.6), sharey=True)
    for ax, (metric, xs) in zip(axes, series.items(), strict=True):
        if len(xs):
            ys = np.arange(1, len(xs) + 1) / len(xs)
            ax.step(np.concatenate([[0], xs]), np.concatenate([[0], ys]), where="post", color="#1f77b4")
            share = float(np.mean(xs <= budget))
            ax.set_title(f"CDF of {metric} ({share:.0%} within {budget:.0f} ms, n={len(xs)})", fontsize=10)
        else:
            ax.set_title(f"CDF of {metric}: no data", fontsize=10)
        ax.axvline(budget, color="#d62728", linestyle="--", linewidth=1.5, label=f"budget {budget:.0f} ms")
        ax.set_xlabel(metric)
        ax.set_xlim(left=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("fraction of turns")
    return _figure_png(fig)


def plot_breakdown(report: dict) -> str | None:
    import matplotlib.pyplot as plt

    rows: list[tuple[str, dict[str, float]]] = []
    means = report["summary"].get("breakdown_mean_ms") or {}
    if any(v for v in means.values()):
        rows.append(("all turns (mean)", {s: means.get(s) or 0.0 for s in STAGE_NAMES}))
    for ci, call in enumerate(report["calls"]):
        turns = [t for t in call.get("turns", []) if t.get("e2e_ms") is not None]
        if turns and len(report["calls"]) > 1:
            rows.append((f"{ci + 1}:{Path(call['file']).stem[:20]}",
                         {s: float(np.mean([t["breakdown"].get(s) or 0.0 for t in turns])) for s in STAGE_NAMES}))
    if not rows:
        return None
    budget = report["summary"]["budget_ms"]
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.5 * len(rows)))
    for row, (_, stages) in enumerate(rows):
        left = 0.0
        for stage in STAGE_NAMES:
            width = stages[stage]
            if width > 0:
                ax.barh(row, width, left=left, color=STAGE_COLORS[stage], edgecolor="white")
                if width > 60:
                    ax.text(left + width / 2, row, f"{width:.0f}", ha="center", va="center", fontsize=7)
            left += width
    _budget_line(ax, budget)
    ax.set_yticks(range(len(rows)), [r for r, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms (mean per turn)")
    ax.set_title("Where the time goes: mean e2e breakdown by stage", pad=16)
    _stage_legend(ax)
    return _figure_png(fig)


# --- audio -----------------------------------------------------------------------------------

def encode_opus(samples: np.ndarray, sample_rate: int, bitrate: int = 24000) -> bytes:
    """int16 (frames,) or (frames, 2) -> Opus in Ogg, about 3 kB per second of stereo."""
    import av

    samples = np.asarray(samples, dtype=np.int16)
    if samples.ndim == 1:
        samples = samples[:, None]
    channels = samples.shape[1]
    layout = "stereo" if channels == 2 else "mono"
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="ogg") as container:
        stream = container.add_stream("libopus", rate=48000, layout=layout)
        stream.bit_rate = bitrate * channels
        resampler = av.AudioResampler(format="s16", layout=layout, rate=48000)
        step = sample_rate // 10
        for start in range(0, len(samples), step):
            block = np.ascontiguousarray(samples[start:start + step].reshape(1, -1))
            frame = av.AudioFrame.from_ndarray(block, format="s16", layout=layout)
            frame.sample_rate = sample_rate
            for rf in resampler.resample(frame):
                container.mux(stream.encode(rf))
        for rf in resampler.resample(None):
            container.mux(stream.encode(rf))
        container.mux(stream.encode(None))
    return buf.getvalue()


def _audio_src(call: dict, out_dir: Path, embed: bool) -> str | None:
    rel = (call.get("outputs") or {}).get("call_wav")
    if not rel:
        return None
    path = out_dir / rel
    if not path.is_file():
        return None
    if not embed:
        return html.escape(rel)
    from voice_agent.audio_io import parse_wav

    info, samples = parse_wav(path.read_bytes(), str(path))
    try:
        data, mime = encode_opus(samples, info.sample_rate), "audio/ogg"
    except Exception:  # no Opus encoder: embed the WAV itself
        data, mime = path.read_bytes(), "audio/wav"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


# --- HTML ------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:8px 0;font-size:0.9em}
td,th{border:1px solid #ddd;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#f4f4f4}.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#1a7f37;font-weight:600}.fail{color:#cf222e;font-weight:600}
.plot{max-width:100%;display:block;margin:8px 0}
.error{background:#fff0f0;border:1px solid #f5c2c2;padding:6px 10px}
details{font-size:0.85em;color:#555}code{font-size:0.9em}audio{width:100%;margin:6px 0}
.muted{color:#777}
"""

# Records load failures and script errors on the page itself, so a headless browser's DOM dump
# shows whether everything rendered.
_CHECK_JS = """
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message || e)); });
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.querySelectorAll('img.plot'));
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var box = document.getElementById('render-check');
  box.setAttribute('data-plots', String(imgs.length));
  box.setAttribute('data-plots-loaded', String(ok.length));
  box.setAttribute('data-js-errors', String(window.__errors.length));
  box.textContent = ok.length + '/' + imgs.length + ' plots rendered' +
    (window.__errors.length ? '; script errors: ' + window.__errors.join('; ') : '');
});
"""


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return '<span class="muted">-</span>'
    if isinstance(v, float):
        return f"{v:.1f}{unit}" if abs(v) < 100 else f"{v:.0f}{unit}"
    return html.escape(str(v)) + unit


def _esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _summary_table(s: dict) -> str:
    rows = []
    for metric in ("e2e_ms", "answer_e2e_ms", "ttfat_ms", "ttft_ms", "stt_ms", "tts_ttfb_ms", "vad_stop_ms"):
        d = s.get(metric) or {}
        rows.append(f"<tr><th>{metric}</th>" + "".join(
            f'<td class="num">{_fmt(d.get(k))}</td>' for k in ("p50", "p95", "p99", "mean", "n")) + "</tr>")
    rate = s.get("budget_pass_rate")
    answer_rate = s.get("answer_budget_pass_rate")
    ttfat_rate = s.get("ttfat_budget_pass_rate")
    verdict = s.get("budget_verdict") or {}
    verdict_html = ('<span class="pass">PASS</span>' if verdict.get("passed") else
                    f'<span class="fail">FAIL: {_esc(", ".join(verdict.get("failed") or []) or "nothing measured")}</span>')
    filler = s.get("filler_turn_share")
    steps = {k: v for k, v in (s.get("ttfat_breakdown_mean_ms") or {}).items() if v is not None}
    steps_html = ", ".join(f"{_esc(k)} {v:.0f}" for k, v in steps.items()) or _fmt(None)
    machine = s.get("machine") or {}
    return f"""
<table><tr><th>metric</th><th>p50</th><th>p95</th><th>p99</th><th>mean</th><th>n</th></tr>{''.join(rows)}</table>
<table>
<tr><th>budget</th><td>{_fmt(s.get('budget_ms'))} ms</td></tr>
<tr><th>budget pass rate (e2e_ms)</th><td>{_fmt(None if rate is None else f'{rate:.0%}')}
  ({s.get('answered_turns', 0)} answered of {s.get('scored_turns', 0)} turns)</td></tr>
<tr><th>answer_e2e_ms within budget</th><td>{_fmt(None if answer_rate is None else f'{answer_rate:.0%}')}</td></tr>
<tr><th>ttfat_ms within budget</th><td>{_fmt(None if ttfat_rate is None else f'{ttfat_rate:.0%}')}</td></tr>
<tr><th>budget verdict (each on &ge; {verdict.get('pass_share', 0.9):.0%} of turns)</th><td>{verdict_html}</td></tr>
<tr><th>turns with a filler</th><td>{_fmt(None if filler is None else f'{filler:.0%}')}</td></tr>
<tr><th>ttfat steps (mean ms)</th><td>{steps_html}</td></tr>
<tr><th>dominant stage</th><td>{_esc(STAGE_LABELS.get(s.get('dominant_stage') or '', s.get('dominant_stage')))}</td></tr>
<tr><th>model / reasoning_effort</th><td>{_esc(s.get('model'))} / {_esc(s.get('reasoning_effort'))}</td></tr>
<tr><th>feed mode</th><td>{_esc(s.get('mode'))}{_lag_note(s)}</td></tr>
<tr><th>calls</th><td>{s.get('calls', 0)} ({s.get('calls_failed', 0)} failed)</td></tr>
<tr><th>machine</th><td>{_esc(machine.get('cpu'))}, {_esc(machine.get('cpu_count'))} CPUs, {_esc(machine.get('platform'))}</td></tr>
<tr><th>command</th><td><code>{_esc(s.get('command'))}</code></td></tr>
<tr><th>created</th><td>{_esc(s.get('created'))}</td></tr>
</table>"""


def _lag_note(s: dict) -> str:
    lag = s.get("input_lag_p95_ms")
    if lag is None:
        return ""
    if s.get("kept_up_in_real_time", True):
        return f"; caller audio reached the VAD {lag:.0f} ms after it was due (p95)"
    return (f'; <span class="fail">the machine did not keep up: caller audio reached the VAD {lag:.0f} ms late '
            "(p95), so every latency includes that backlog</span>")


def _expectations_html(report: dict) -> str:
    rows = []
    for call in report["calls"]:
        exp = call.get("expectations")
        if not exp:
            continue
        for check in exp.get("checks", []):
            cls = "pass" if check["passed"] else "fail"
            rows.append(f"<tr><td>{_esc(Path(call['file']).name)}</td><td>{_esc(check['check'])}</td>"
                        f"<td>{_esc(check['expected'])}</td><td>{_esc(check['actual'])}</td>"
                        f"<td class=\"{cls}\">{'PASS' if check['passed'] else 'FAIL'}</td></tr>")
    if not rows:
        return ""
    return ("<h2>Expectations</h2><table><tr><th>call</th><th>check</th><th>expected</th><th>actual</th>"
            f"<th>result</th></tr>{''.join(rows)}</table>")


def _tool_calls_html(calls: list[dict]) -> str:
    return "<br>".join(f"<code>{_esc(c.get('name'))}({_esc(json.dumps(c.get('arguments'), default=str))})</code>"
                       f" &rarr; <code>{_esc(json.dumps(c.get('result'), default=str)[:200])}</code>"
                       for c in calls)


def _call_html(ci: int, call: dict, out_dir: Path, embed_audio: bool) -> str:
    title = f"<h3>Call {ci + 1}: {_esc(call['file'])}</h3>"
    if call.get("error"):
        return title + f'<div class="error">skipped: {_esc(call["error"])}</div>'
    if call.get("warning"):
        title += f'<div class="error">warning: {_esc(call["warning"])}</div>'
    src = _audio_src(call, out_dir, embed_audio)
    audio = (f'<audio controls preload="metadata" src="{src}"></audio>'
             '<div class="muted">left: caller (the recording), right: the bot, time-aligned</div>') if src else ""
    greeting = call.get("greeting") or {}
    rows = []
    if greeting.get("bot_text"):
        rows.append(f'<tr><td>greeting</td><td></td><td>{_esc(greeting["bot_text"])}</td><td colspan="5"></td></tr>')
    for t in call.get("turns", []):
        ok = t.get("within_budget")
        if t.get("e2e_ms") is not None:
            flag = f'<span class="{"pass" if ok else "fail"}">{"yes" if ok else "no"}</span>'
        else:  # a turn the LLM was asked about but whose answer never played is a miss
            flag = '<span class="fail">no answer</span>' if t.get("llm_calls") else ""
        why = "caller spoke again first" if t.get("interrupted") else "nothing played"
        said = _esc(t.get("bot_text")) or f'<span class="muted">(no answer: {why})</span>'
        if t.get("bot_text") and not t.get("answered"):
            said += f' <span class="muted">(never played: {why})</span>'
        if t.get("filler_text"):
            said = f'<span class="muted">[{_esc(t["filler_text"])}]</span> ' + said
        extra = ""
        if t.get("reasoning"):
            extra += f"<details><summary>reasoning (never spoken)</summary>{_esc(t['reasoning'])}</details>"
        if t.get("tool_calls"):
            extra += f"<details open><summary>tool calls</summary>{_tool_calls_html(t['tool_calls'])}</details>"
        at = (t.get("timeline_s") or {}).get("true_speech_end")
        rows.append(
            f"<tr><td>{t['index'] + 1}{'' if at is None else f' <span class=muted>@{at:.1f}s</span>'}</td>"
            f"<td>{_esc(t.get('user_text'))}</td><td>{said}{extra}</td>"
            f'<td class="num">{_fmt(t.get("e2e_ms"))}</td><td class="num">{_fmt(t.get("answer_e2e_ms"))}</td>'
            f'<td class="num">{_fmt(t.get("ttfat_ms"))}</td>'
            f'<td class="num">{_fmt(t.get("stt_ms"))}</td><td>{flag}</td></tr>')
    table = ("<table><tr><th>turn</th><th>caller (STT)</th><th>bot</th><th>e2e_ms</th><th>answer_e2e_ms</th><th>ttfat_ms</th>"
             f"<th>stt_ms</th><th>in budget</th></tr>{''.join(rows)}</table>")
    links = " ".join(f'<a href="{_esc(v)}">{_esc(k)}</a>' for k, v in (call.get("outputs") or {}).items())
    return title + audio + table + (f'<div class="muted">files: {links}</div>' if links else "")


def render_html(report: dict, out_dir: Path, *, embed_audio: bool = True) -> str:
    s = report["summary"]
    plots = [("waterfall", plot_waterfall(report)), ("cdf", plot_cdfs(report)), ("breakdown", plot_breakdown(report))]
    plot_html = "".join(
        f'<img class="plot" id="plot-{name}" alt="{name} plot" src="data:image/png;base64,{png}">'
        for name, png in plots if png) or '<p class="muted">No answered turns to plot.</p>'
    calls = "".join(_call_html(i, c, out_dir, embed_audio) for i, c in enumerate(report["calls"]))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>voice-agent replay report</title>
<style>{_CSS}</style><script>{_CHECK_JS}</script></head>
<body>
<h1>voice-agent replay report</h1>
<p>Each turn is measured from the <b>true end of the caller's speech</b> (offline VAD over the
recording) to the <b>first bot audio</b> written to the transport, against a
{_fmt(s.get('budget_ms'))} ms budget.</p>
<div id="render-check" class="muted"></div>
<h2>Summary</h2>{_summary_table(s)}
{_expectations_html(report)}
<h2>Plots</h2>{plot_html}
<h2>Calls and transcripts</h2>{calls}
</body></html>
"""
