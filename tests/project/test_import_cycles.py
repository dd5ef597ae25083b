"""No import cycles in engine/ or voice_agent/, not even under TYPE_CHECKING or inside a function."""

from __future__ import annotations

from tests.import_graph import cycles, graph


def test_the_packages_have_no_import_cycles():
    assert cycles(graph()) == []


def test_the_check_finds_a_cycle_where_there_is_one(tmp_path):
    pkg = tmp_path / "engine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from engine.b import x\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from engine import c\nx = 1\n")
    (pkg / "c.py").write_text("def f():\n    from engine.a import y\n")
    assert cycles(graph(tmp_path, ("engine",))) == [["engine.a", "engine.b", "engine.c"]]


PUBLIC_ENGINE_MODULES = {"engine"}  # engine/__init__.py: its public names (`_PUBLIC`)

# engine/'s folders in layers: a module imports only from its own layer or below.
LAYERS = {"errors": 0, "config": 0, "cpu_isa": 0, "model": 1, "runtime": 2, "text": 3, "api": 4, "serve": 5, "tools": 6, "train": 6}
TYPE_ONLY = {("engine.runtime.decode", "engine.text.request")}  # annotations under TYPE_CHECKING


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "engine":
        return None
    return LAYERS["api"] if len(parts) == 1 else LAYERS.get(parts[1])


def test_the_engine_folders_import_only_downward():
    upward = sorted((a, b) for a, bs in graph().items() for b in bs
                    if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a))
    assert [e for e in upward if e not in TYPE_ONLY] == []


def test_voice_agent_imports_the_engine_only_through_its_public_names():
    inside = sorted((a, b) for a, bs in graph().items() if a.startswith("voice_agent")
                    for b in bs if b.startswith("engine.") and b not in PUBLIC_ENGINE_MODULES)
    assert inside == [], inside
