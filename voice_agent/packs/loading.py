"""Opening a pack's backend: its Python class (found in the pack's folder) or its webhook.

A pack folder is imported as a package of its own, so its backend.py may import its other files
(`from .store import Diary`) and a builder's pack outside this repository loads the same way as ours.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from voice_agent.packs.backend import Backend
from voice_agent.packs.webhook import WebhookBackend


class Scenario(Protocol):
    """What opening a pack's backend reads of its scenario (voice_agent/scenarios.py's `Scenario`)."""

    name: str
    folder: Path | None
    backend: str | None
    webhook: dict | None
    hours: Any

    @property
    def tool_names(self) -> list[str]: ...

STORES_DIR = Path.home() / ".cache" / "voice-agent" / "stores"


class PackError(ValueError):
    """A pack whose backend cannot be found or made; the message says which and why."""


def default_store(scenario: Scenario) -> Path:
    return STORES_DIR / scenario.name


def open_backend(scenario: Scenario, store: str | Path | None = None, today: dt.date | None = None) -> Any:
    """A new backend for one call of `scenario`: the webhook it names, else its backend class made on
    `store` (unset: ~/.cache/voice-agent/stores/<name>). A pack with neither gets a `Backend` with no
    tools: each tool answers that it is not available."""
    if scenario.webhook:
        w = scenario.webhook
        return WebhookBackend(w["url"], scenario.tool_names, timeout_s=float(w.get("timeout_s", 5.0)),
                              retries=int(w.get("retries", 1)), headers=w.get("headers"))
    cls = backend_class(scenario) if scenario.backend else Backend
    store = Path(store) if store else default_store(scenario)
    try:
        return cls(store=store, today=today, hours=scenario.hours)
    except Exception as e:
        raise PackError(f"scenario {scenario.name}: {cls.__name__}(store={store}) failed: {type(e).__name__}: {e}") from e


def backend_class(scenario: Scenario) -> type:
    """The class `scenario.backend` names: "Class" (in the pack's backend.py), "file.py:Class" (in
    the pack's folder) or "package.module:Class" (importable)."""
    spec = str(scenario.backend)
    where, _, name = spec.rpartition(":")
    if not where:
        where, name = "backend.py", spec
    if where.endswith(".py"):
        if scenario.folder is None:
            raise PackError(f"scenario {scenario.name}: backend {spec!r} names a file, but the pack has no folder")
        module = pack_module(scenario.folder, where[:-3])
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise PackError(f"scenario {scenario.name}: cannot import {where!r} for its backend: {e}") from None
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise PackError(f"scenario {scenario.name}: {where} has no class {name!r}")
    return cls


def pack_module(folder: str | Path, name: str) -> ModuleType:
    """The module `name` (a .py file) of the pack in `folder`, imported inside the pack's own package."""
    folder = Path(folder).resolve()
    path = folder / f"{name}.py"
    if not path.is_file():
        raise PackError(f"no {path}")
    package = _package(folder)
    full = f"{package}.{name}"
    try:
        return importlib.import_module(full)
    except Exception as e:
        raise PackError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e


def _package(folder: Path) -> str:
    """A package for the pack's folder (made once per folder): `voice_agent_pack_<name>_<hash>`."""
    digest = hashlib.sha1(str(folder).encode()).hexdigest()[:8]
    name = f"voice_agent_pack_{''.join(c if c.isalnum() else '_' for c in folder.name)}_{digest}"
    if name not in sys.modules:
        init = folder / "__init__.py"
        spec = importlib.util.spec_from_file_location(name, init if init.is_file() else None,
                                                      submodule_search_locations=[str(folder)])
        if spec is None:
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(folder)]
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        if spec.loader is not None:
            spec.loader.exec_module(module)
    return name


__all__ = ["PackError", "STORES_DIR", "backend_class", "default_store", "open_backend", "pack_module"]
