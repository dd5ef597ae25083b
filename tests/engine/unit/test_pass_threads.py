"""A narrow pass runs on one thread or all, whichever measured cheaper (engine/runtime/pass_threads.py), and that
changes no number."""

from __future__ import annotations

import pytest
import torch

from engine.model.precision import native_bf16_flags
from engine.runtime.pass_threads import (
    EXPLORE_EVERY,
    NARROW_THREADS_ENV,
    SERIAL_UP_TO,
    NarrowThreads,
    narrow_threads_mode,
    serial_up_to,
)


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_a_pinned_narrow_pass_runs_on_one_thread_and_the_count_comes_back(two_threads):
    one = NarrowThreads(8, "one")
    with one.run(4):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with one.run(9):
        assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), one.run(1):
        raise RuntimeError("a pass failed")
    assert torch.get_num_threads() == 2


def test_one_configured_thread_stays_one():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        chooser = NarrowThreads(8, "auto")
        with chooser.run(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1 and chooser.costs() == {}  # nothing to choose: nothing timed
    finally:
        torch.set_num_threads(before)


def test_emulated_bf16_runs_its_passes_on_every_thread(monkeypatch):
    from engine.model import precision

    monkeypatch.setattr(precision, "native_bf16_flags", lambda: [])
    assert serial_up_to("cpu", "bf16") == 0 and serial_up_to("cpu", "w8a8") == SERIAL_UP_TO["w8a8"]


def test_only_a_cpu_with_a_rounding_free_precision_runs_serial():
    assert serial_up_to("cpu", "w8a8") == SERIAL_UP_TO["w8a8"] > 0
    # emulated bf16 rounds by the thread count (capped to AVX512 without BF16: 0.29 apart at 5 tokens)
    assert serial_up_to("cpu", "bf16") == (SERIAL_UP_TO["bf16"] if native_bf16_flags() else 0)
    assert serial_up_to("cpu", "fp32") == 0  # fp32 decodes are promised token for token: all threads
    assert serial_up_to("cuda", "bf16") == 0
    assert serial_up_to("cpu", None) == 0


def threads_inside(chooser: NarrowThreads, tokens: int) -> int:
    with chooser.run(tokens):
        return torch.get_num_threads()


def test_each_count_is_timed_once_then_the_cheaper_one_runs_and_the_other_is_tried_now_and_then(two_threads):
    timed = NarrowThreads(8, "auto")
    assert threads_inside(timed, 1) == 1 and threads_inside(timed, 1) == 2  # one, then all, each timed
    assert set(timed.costs()) == {"1-1 one", "1-1 all"}
    assert threads_inside(timed, 9) == 2 and set(timed.costs()) == {"1-1 one", "1-1 all"}  # wide: untimed
    chooser = NarrowThreads(8, "auto")
    chooser.record(1, serial=True, ms=20.0)
    chooser.record(1, serial=False, ms=10.0)
    picks = [chooser.serial(1) for _ in range(3 * EXPLORE_EVERY)]
    assert picks.count(True) == 3 and all(picks[i] for i in range(EXPLORE_EVERY - 1, len(picks), EXPLORE_EVERY))
    assert chooser.serial(5) is True  # another width class has its own timings: untimed, it starts on one


def test_when_the_cheaper_count_turns_costly_the_choice_follows():
    chooser = NarrowThreads(8, "auto")
    chooser.record(2, serial=True, ms=20.0)
    chooser.record(2, serial=False, ms=10.0)
    assert chooser.serial(2) is False
    for _ in range(10):  # another process took a core: passes on all threads now cost 40 ms
        chooser.record(2, serial=False, ms=40.0)
    assert chooser.serial(2) is True
    assert chooser.costs()["2-3 all"] > chooser.costs()["2-3 one"] == 20.0


def test_a_failed_pass_is_not_timed_and_the_count_comes_back(two_threads):
    chooser = NarrowThreads(8, "auto")
    with pytest.raises(RuntimeError), chooser.run(1):
        raise RuntimeError("a pass failed")
    assert torch.get_num_threads() == 2 and chooser.costs() == {}


def test_a_fixed_mode_is_obeyed_and_a_bad_one_is_refused(two_threads, monkeypatch):
    assert threads_inside(NarrowThreads(8, "one"), 8) == 1
    assert threads_inside(NarrowThreads(8, "all"), 1) == 2
    assert NarrowThreads(8, "one").costs() == {}
    monkeypatch.setenv(NARROW_THREADS_ENV, "ALL")
    assert narrow_threads_mode() == "all" and NarrowThreads(8).mode == "all"
    monkeypatch.setenv(NARROW_THREADS_ENV, "three")
    with pytest.raises(ValueError, match="VOICE_AGENT_NARROW_THREADS"):
        NarrowThreads(8)


@pytest.fixture(scope="module")
def engine_at():
    """The default model at a precision, loaded once for this module (leaving the thread count be)."""
    from engine import Engine

    loaded: dict = {}

    def load(precision: str):
        if precision not in loaded:
            loaded[precision] = Engine.load("default", precision=precision)
        return loaded[precision]

    yield load
    loaded.clear()


@pytest.mark.parametrize("precision", sorted(SERIAL_UP_TO))
@pytest.mark.slow
def test_a_pass_gives_the_same_logits_on_one_thread_and_two(engine_at, precision, two_threads):
    """What lets a precision run narrow passes on one thread: no logit moves, at any width."""
    if serial_up_to("cpu", precision) == 0:
        pytest.skip(f"{precision} passes run on all threads on this CPU (no native bf16: {native_bf16_flags()})")
    eng = engine_at(precision)
    m = eng.model
    prefix = torch.randint(0, m.cfg.vocab_size, (1, 200), generator=torch.Generator().manual_seed(0))
    for width in (1, 5, 40):
        x = torch.randint(0, m.cfg.vocab_size, (1, width), generator=torch.Generator().manual_seed(width))
        out = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.inference_mode():
                cache = eng.new_cache(capacity=256)
                mask, _ = cache.mask(torch.ones(200, 200, dtype=torch.bool).tril(), 200)
                slots = cache.slots_for(200)
                m.hidden(prefix, slots, mask, cache, slots)
                cache.advance(0, 200)
                mask, _ = cache.mask(torch.ones(width, width, dtype=torch.bool), width)
                slots = cache.slots_for(width)
                out.append(m.lm_head(m.hidden(x, slots, mask, cache, slots)[0]).float())
        assert torch.equal(out[0], out[1]), (width, (out[0] - out[1]).abs().max())


def test_a_pass_counts_the_rows_it_spans_padding_included(engine_at, two_threads, monkeypatch):
    """The linears of a pass over rows 0 and k see k + 1 padded rows, not 2."""
    from engine.runtime.sequence import StepInput

    runner = engine_at("w8a8").runner
    limit = runner.serial_up_to
    assert limit == SERIAL_UP_TO["w8a8"] == runner.narrow_threads.limit
    monkeypatch.setattr(runner, "narrow_threads", NarrowThreads(limit, "one"))  # narrow: one thread

    def one(row: int) -> tuple[int, StepInput]:
        return row, StepInput([1], 1, 0, 0)

    def threads(rows) -> int:
        with runner.threads(rows):
            return torch.get_num_threads()

    assert threads([]) == 1
    assert threads([one(0), one(limit - 1)]) == 1  # limit rows of one token
    assert threads([one(0), one(limit)]) == 2  # two inputs, but limit + 1 rows
    assert torch.get_num_threads() == 2


@pytest.mark.slow
def test_a_bad_setting_stops_a_command_with_its_code_and_no_traceback(monkeypatch, capsys):
    from voice_agent.cli import main

    monkeypatch.setenv(NARROW_THREADS_ENV, "three")
    assert main(["simulate", "scenarios/dental_clinic/callers/heldout_subset20.yaml"]) == 2
    err = capsys.readouterr().err
    assert "[invalid_narrow_threads]" in err and NARROW_THREADS_ENV in err and "Traceback" not in err
