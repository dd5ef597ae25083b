"""A pack's own adapter: `scenarios/<name>/adapter.safetensors`, written by `voice-agent train
--scenario <name>`, is what the default model loads whenever that pack is used; a pack without one
runs on the shipped generalist (engine/weights/default_adapter.safetensors)."""

from __future__ import annotations

from pathlib import Path

from voice_agent.scenarios import Scenario, load_scenario

ADAPTER_FILE = "adapter.safetensors"


def pack_adapter(scenario: Scenario | str | Path | None, model: str = "default") -> Path | None:
    """The pack's adapter file when the default model is used and the pack has one; else None."""
    if scenario is None or str(model) != "default":
        return None
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    path = sc.folder / ADAPTER_FILE if sc.folder else None
    return path if path is not None and path.is_file() else None


__all__ = ["ADAPTER_FILE", "pack_adapter"]
