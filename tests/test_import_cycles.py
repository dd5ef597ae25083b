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
