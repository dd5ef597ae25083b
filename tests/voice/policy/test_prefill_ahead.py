"""Speculative prefill (`Engine.prefill_ahead`): a guess at the coming turn never changes what the
turn says, saves the prefill when it is right, and never costs the cache what the last turn left."""

from __future__ import annotations

import pytest

from engine import Engine
from tests.tiny_models import save_tiny

SYSTEM = {"role": "system", "content": "You are a receptionist at a dental clinic."}
TURN1 = [SYSTEM, {"role": "user", "content": "Hi, I need a cleaning next week."}]
HEARD = "Do you have anything on Tuesday morning at ten"


@pytest.fixture(scope="module")
def eng(tmp_path_factory):
    folder = save_tiny(tmp_path_factory.mktemp("tiny") / "qwen2", "qwen2", seed=1)
    return Engine.load(folder, precision="fp32", family="smollm2-dllm", block_size=4)


def second_turn(eng, sess, said: str):
    first = eng.chat(TURN1, reasoning_effort="instant", max_tokens=8, session=sess)
    return TURN1 + [{"role": "assistant", "content": first.text}, {"role": "user", "content": said}]


@pytest.mark.parametrize("guess", [HEARD, "Do you have anything on Friday"])
def test_a_guess_changes_nothing_said_and_a_right_one_leaves_almost_nothing_to_prefill(eng, guess):
    sess, scratch_sess = eng.session(), eng.session()
    msgs = second_turn(eng, sess, HEARD)
    second_turn(eng, scratch_sess, HEARD)
    held = eng.prefill_ahead(sess, msgs[:-1] + [{"role": "user", "content": guess}], reasoning_effort="instant")
    assert held is not None and held > sess.settled  # it extended the cache past the last prompt
    got = eng.chat(msgs, reasoning_effort="instant", max_tokens=8, session=sess)
    want = eng.chat(msgs, reasoning_effort="instant", max_tokens=8, session=scratch_sess)
    assert got.raw_text == want.raw_text
    left = got.metrics["prompt_tokens"] - got.metrics["cached_tokens"]
    if guess == HEARD:
        assert left <= 4, got.metrics  # at most the block the prompt's end falls in
    else:
        assert left > 4  # the words after "anything on" were prefilled again


def test_a_guess_that_would_crop_the_last_turn_or_meets_a_busy_session_is_skipped(eng):
    sess = eng.session()
    msgs = second_turn(eng, sess, HEARD)
    before = list(sess.cached_tokens())
    stale = [SYSTEM, {"role": "user", "content": "Something else entirely."}]  # diverges inside turn one
    assert eng.prefill_ahead(sess, stale, reasoning_effort="instant") is None
    assert sess.cached_tokens() == before
    with sess.lock:  # a turn is decoding
        assert eng.prefill_ahead(sess, msgs, reasoning_effort="instant") is None
    assert sess.cached_tokens() == before
