"""A narrow pass runs on one thread (engine/pass_threads.py), and that changes no number."""

from __future__ import annotations

import pytest
import torch

from engine.pass_threads import SERIAL_UP_TO, serial_up_to, threads_for


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_a_narrow_pass_runs_on_one_thread_and_the_count_comes_back(two_threads):
    with threads_for(4, 8):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with threads_for(9, 8):
        assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError), threads_for(1, 8):
        raise RuntimeError("a pass failed")
    assert torch.get_num_threads() == 2


def test_one_configured_thread_stays_one():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threads_for(1, 8):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_only_a_cpu_with_a_rounding_free_precision_runs_serial():
    assert serial_up_to("cpu", "w8a8") == SERIAL_UP_TO["w8a8"] > 0
    assert serial_up_to("cpu", "fp32") == 0  # fp32 decodes are promised token for token: all threads
    assert serial_up_to("cuda", "bf16") == 0
    assert serial_up_to("cpu", None) == 0


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
def test_a_pass_gives_the_same_logits_on_one_thread_and_two(engine_at, precision, two_threads):
    """What lets a precision run narrow passes on one thread: no logit moves, at any width."""
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


def test_a_pass_counts_the_rows_it_spans_padding_included(engine_at, two_threads):
    """The linears of a pass over rows 0 and k see k + 1 padded rows, not 2."""
    from engine.sequence import StepInput

    runner = engine_at("w8a8").runner
    limit = runner.serial_up_to
    assert limit == SERIAL_UP_TO["w8a8"]

    def one(row: int) -> tuple[int, StepInput]:
        return row, StepInput([1], 1, 0, 0)

    def threads(rows) -> int:
        with runner.threads(rows):
            return torch.get_num_threads()

    assert threads([]) == 1
    assert threads([one(0), one(limit - 1)]) == 1  # limit rows of one token
    assert threads([one(0), one(limit)]) == 2  # two inputs, but limit + 1 rows
    assert torch.get_num_threads() == 2
