"""The continuous-batching scheduler on a real (tiny, random-weight, fp32) block-diffusion model:
batched decoding is token-identical to running each request alone; cancel, faults, backpressure
and sessions behave."""

from __future__ import annotations

import time

import pytest
import torch

from engine import Engine
from engine.serve.scheduler import QueueFull, QueueTimeout, RequestCancelled, Scheduler
from engine.tools.loadtest import write_random_model

SYSTEM = ("You are Maya, the receptionist at Bright Smile Dental, on a phone call. Speak in one or two "
          "short, friendly sentences. The clinic is open Monday to Friday, 9 am to 5 pm.")
USERS = ["Hi", "I want to book a cleaning for next Tuesday at 3 pm please, my name is Jo.",
         "What time do you open on Mondays and is parking free?", "Cancel my appointment",
         "Can I move my filling to Friday?", "hello??", "Do you take insurance, and how much is a checkup?", "ok"]
EFFORTS = ["instant", "low", "medium", "instant", "high", "low", "instant", "medium"]
MAX_TOKENS = [20, 33, 17, 40, 25, 9, 48, 30]


@pytest.fixture(scope="module")
def eng(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: one thread is several times faster than two fighting
    folder = write_random_model(tmp_path_factory.mktemp("tiny") / "tiny-dllm")
    yield Engine.load(folder, precision="fp32")  # token identity of batched vs alone is an fp32 property
    torch.set_num_threads(threads)


def _requests(eng, n=8, **kw):
    out = []
    for i in range(n):
        msgs = ([{"role": "system", "content": SYSTEM}] if i % 2 else []) + [{"role": "user", "content": USERS[i]}]
        out.append(eng.prepare(msgs, reasoning_effort=EFFORTS[i], max_tokens=MAX_TOKENS[i], **kw))
    return out


def _alone(eng, n=8):
    res = []
    for req in _requests(eng, n):
        result = list(req.run_alone())[-1].result
        res.append((req.state.generated, result.raw_text))
    return res


@pytest.fixture(scope="module")
def alone(eng):
    return _alone(eng)


@pytest.mark.parametrize("max_batch,prefix_entries", [(3, 4), (8, 0), (8, 4)])
def test_batched_is_token_identical_to_alone(eng, alone, max_batch, prefix_entries):
    with Scheduler(eng, max_batch=max_batch, prefix_entries=prefix_entries) as sch:
        tickets = [sch.submit(r) for r in _requests(eng)]
        results = [t.result_sync(timeout=120) for t in tickets]
        snap = sch.snapshot()
    assert [(t.req.state.generated, r.raw_text) for t, r in zip(tickets, results, strict=True)] == alone
    assert max(int(k) for k in snap["batch_hist"]) == max_batch  # rows really were decoded together
    assert snap["completed"] == 8 and snap["active"] == 0 and snap["failed"] == 0
    if max_batch == 3 and prefix_entries:
        assert snap["prefix_hits"] >= 1  # later prompts reused the shared system prompt's K/V


def test_batched_bf16_decodes_every_request_within_its_budget(tmp_path):
    """bf16 (the AVX512-BF16/AMX default) rounds a batched pass differently, so token identity is an fp32
    property; what holds in bf16: rows really batch, every request finishes within max_tokens, none fail."""
    bf = Engine.load(write_random_model(tmp_path / "tiny-dllm"), precision="bf16")
    with Scheduler(bf, max_batch=4) as sch:
        tickets = [sch.submit(r) for r in _requests(bf)]
        results = [t.result_sync(timeout=120) for t in tickets]
        snap = sch.snapshot()
    for res, budget in zip(results, MAX_TOKENS, strict=True):
        assert 0 < res.metrics["completion_tokens"] <= budget
        assert res.finish_reason in ("stop", "length")
    assert max(int(k) for k in snap["batch_hist"]) == 4 and snap["completed"] == 8 and snap["failed"] == 0


def test_session_turns_reuse_the_call_cache_and_match_a_lone_session(eng):
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi, can I book a cleaning?"}]
    ref_sess = eng.session()
    ref1 = eng.chat(turn1, session=ref_sess, reasoning_effort="instant", max_tokens=16)
    turn2 = turn1 + [ref1.message(), {"role": "user", "content": "Tuesday at ten, please."}]
    ref2 = eng.chat(turn2, session=ref_sess, reasoning_effort="instant", max_tokens=16)

    sess = eng.session()
    with Scheduler(eng, max_batch=4) as sch:
        r1 = sch.submit(eng.prepare(turn1, session=sess, reasoning_effort="instant", max_tokens=16)).result_sync(60)
        r2 = sch.submit(eng.prepare(turn1 + [r1.message(), turn2[-1]], session=sess,
                                    reasoning_effort="instant", max_tokens=16)).result_sync(60)
    assert (r1.raw_text, r2.raw_text) == (ref1.raw_text, ref2.raw_text)
    assert r2.metrics["cached_tokens"] >= r1.metrics["prompt_tokens"]  # turn 2 prefilled only the new words
    assert sess.tokens and int(sess.cache.lengths[0]) == len(sess.tokens)


def test_cancel_frees_the_row_and_the_others_are_unaffected(eng, alone):
    with Scheduler(eng, max_batch=4) as sch:
        long = sch.submit(eng.prepare([{"role": "user", "content": "Tell me everything."}],
                                      reasoning_effort="instant", max_tokens=4000))
        others = [sch.submit(r) for r in _requests(eng, 3)]
        for item in long.iter_sync(timeout=60):
            if item.kind == "event":
                break
        long.cancel()
        results = [t.result_sync(timeout=120) for t in others]
        with pytest.raises(RequestCancelled):
            long.result_sync(timeout=30)
        deadline = time.monotonic() + 10
        while sch.snapshot()["active"] and time.monotonic() < deadline:
            time.sleep(0.05)
        snap = sch.snapshot()
    assert snap["active"] == 0 and snap["cancelled"] == 1
    assert len(long.req.state.generated) < 4000
    assert [(t.req.state.generated, r.raw_text) for t, r in zip(others, results, strict=True)] == alone[:3]


def test_a_fault_in_one_request_fails_it_alone(eng, alone):
    reqs = _requests(eng, 4)
    bad_absorb, bad_forward = reqs[1], reqs[2]

    def failing_absorb(orig=bad_absorb.absorb, calls=[0]):  # noqa: B006 - a call counter
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("boom in absorb")
        return orig()

    def poisoning_absorb(orig=bad_forward.absorb, calls=[0]):  # noqa: B006
        calls[0] += 1
        if calls[0] == 2 and not bad_forward.state.done:
            # an impossible token id in this row's next input: the batched forward itself raises
            bad_forward.state.pending.append(10**9)
        return orig()

    bad_absorb.absorb = failing_absorb
    bad_forward.absorb = poisoning_absorb
    with Scheduler(eng, max_batch=4) as sch:
        tickets = [sch.submit(r) for r in reqs]
        outcomes = []
        for t in tickets:
            try:
                outcomes.append(t.result_sync(timeout=120))
            except Exception as e:  # noqa: BLE001 - the outcome under test
                outcomes.append(e)
        snap = sch.snapshot()
    assert isinstance(outcomes[1], RuntimeError) and "boom" in str(outcomes[1])
    assert isinstance(outcomes[2], IndexError | RuntimeError) and not isinstance(outcomes[2], RequestCancelled)
    for i in (0, 3):
        assert (tickets[i].req.state.generated, outcomes[i].raw_text) == alone[i]
    assert snap["failed"] == 2 and snap["completed"] == 2 and snap["step_fallbacks"] >= 1
    assert snap["active"] == 0 and snap["running"]


def test_backpressure_queue_limit_and_queue_timeout(eng):
    with Scheduler(eng, max_batch=1, max_queue=1, queue_timeout_s=0.5) as sch:
        busy = sch.submit(eng.prepare([{"role": "user", "content": "Talk."}], reasoning_effort="instant",
                                      max_tokens=4000))
        assert next(busy.iter_sync(timeout=60)).kind == "admitted"
        queued = sch.submit(eng.prepare([{"role": "user", "content": "Me next"}], max_tokens=4))
        with pytest.raises(QueueFull) as full:
            sch.submit(eng.prepare([{"role": "user", "content": "And me"}], max_tokens=4))
        assert full.value.status == 429 and full.value.retry_after >= 1
        with pytest.raises(QueueTimeout) as waited:
            queued.result_sync(timeout=30)
        assert waited.value.status == 503 and waited.value.retry_after >= 1
        busy.cancel()
        snap = sch.snapshot()
    assert snap["rejected_full"] == 1 and snap["timed_out"] == 1


def test_turns_of_one_call_never_decode_at_the_same_time(eng):
    sess = eng.session()
    msgs = [{"role": "user", "content": "Hello there"}]
    with Scheduler(eng, max_batch=4) as sch:
        a = sch.submit(eng.prepare(msgs, session=sess, reasoning_effort="instant", max_tokens=24))
        b = sch.submit(eng.prepare(msgs, session=sess, reasoning_effort="instant", max_tokens=24))
        a.result_sync(60)
        b.result_sync(60)
    assert b.admitted_at >= a.finished_at


def test_stop_fails_what_is_left_and_threads_end(eng):
    sch = Scheduler(eng, max_batch=1).start()
    thread = sch._thread
    t = sch.submit(eng.prepare([{"role": "user", "content": "Talk."}], reasoning_effort="instant", max_tokens=4000))
    assert next(t.iter_sync(timeout=60)).kind == "admitted"
    sch.stop()
    with pytest.raises(Exception, match="shutting down"):
        t.result_sync(timeout=10)
    assert not thread.is_alive()


def test_growing_cache_and_row_moves(eng):
    """Prompts longer than the cache's first capacity make it grow inside the forward; requests
    of different lengths then finish out of order, so rows move down. Outputs still match."""
    long_system = SYSTEM + " " + " ".join(f"Rule {i}: be kind to caller number {i}." for i in range(60))
    reqs = lambda: [eng.prepare([{"role": "system", "content": long_system}, {"role": "user", "content": u}],  # noqa: E731
                                reasoning_effort="instant", max_tokens=m)
                    for u, m in [("Hi", 40), ("Book me in", 8), ("Cancel", 24), ("Hello", 16)]]
    ref = []
    for r in reqs():
        ref.append(list(r.run_alone())[-1].result.raw_text)
    assert len(reqs()[0].tokens) > 600
    sess = eng.session()
    with Scheduler(eng, max_batch=4) as sch:
        tickets = [sch.submit(r) for r in reqs()]
        assert [t.result_sync(timeout=120).raw_text for t in tickets] == ref
        # a session turn after the batch cache grew: its row is extracted into the call's cache
        r = sch.submit(eng.prepare([{"role": "system", "content": long_system}, {"role": "user", "content": "Hi"}],
                                   session=sess, reasoning_effort="instant", max_tokens=40)).result_sync(120)
        snap = sch.snapshot()
    assert r.raw_text == ref[0] and int(sess.cache.lengths[0]) > 600
    assert snap["cache_capacity"] > 512 and snap["failed"] == 0 and snap["running"]


def test_a_warm_up_and_a_guess_prefill_the_session_and_the_turn_decodes_as_over_a_lone_session(eng):
    turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi, can I book a cleaning?"}]
    ref = eng.chat(turn, session=eng.session(), reasoning_effort="instant", max_tokens=16)
    sess = eng.session()
    with Scheduler(eng, max_batch=4, prefix_entries=0) as sch:
        warm = sch.submit_prefill(eng.warm_request(sess, turn[:1], reasoning_effort="instant"), guess=False).done.result(60)
        assert 0 < warm == sess.cache.length(0) and sess.settled == warm
        guess = sch.submit_prefill(eng.guess_request(sess, turn, reasoning_effort="instant"), guess=True).done.result(60)
        assert guess == len(eng.prepare(turn, reasoning_effort="instant").tokens) - 1  # all but the last token
        got = sch.submit(eng.prepare(turn, session=sess, reasoning_effort="instant", max_tokens=16)).result_sync(60)
        assert sch.snapshot()["prefills_ahead"] == 2
    assert got.raw_text == ref.raw_text
    assert got.metrics["cached_tokens"] == guess and "queue_wait_ms" in got.metrics


def test_a_guess_gives_way_to_a_turn_of_its_own_call_and_to_a_backlog(eng):
    turn = [{"role": "user", "content": "Hi, can I book a cleaning?"}]
    sess, other, third = eng.session(), eng.session(), eng.session()
    sch = Scheduler(eng, max_batch=1, prefix_entries=0)  # not started yet: the queue stays as submitted
    busy = sch.submit(eng.prepare(turn, session=sess, reasoning_effort="instant", max_tokens=8))
    assert not busy.waits
    assert sch.submit_prefill(eng.guess_request(sess, turn), guess=True).done.result(5) is None  # its own turn is due
    queued = sch.submit(eng.prepare(turn, session=other, reasoning_effort="instant", max_tokens=8))
    assert queued.waits and sch.backlogged  # a turn ahead of it in the queue: it waits its turn
    assert sch.submit_prefill(eng.guess_request(third, turn), guess=True).done.result(5) is None  # turns wait
    with sch:
        busy.result_sync(60), queued.result_sync(60)
    assert sch.snapshot()["prefills_skipped"] == 2 and not third.tokens


def test_a_cancelled_session_turn_keeps_what_its_row_held(eng):
    turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Tell me all about whitening."}]
    sess = eng.session()
    with Scheduler(eng, max_batch=2, prefix_entries=0) as sch:
        t = sch.submit(eng.prepare(turn, session=sess, reasoning_effort="instant", max_tokens=64))
        items = t.iter_sync(60)
        while next(items).kind != "event":
            pass
        t.cancel()  # a barge-in after the first committed words
        assert [i.kind for i in items][-1] == "error"
        deadline = time.monotonic() + 10
        while sess.lock.locked() and time.monotonic() < deadline:
            time.sleep(0.01)
    prompt = len(eng.prepare(turn, reasoning_effort="instant").tokens)
    assert sess.cache.length(0) >= prompt and sess.tokens[:prompt] == eng.prepare(turn, reasoning_effort="instant").tokens


@pytest.mark.slow
def test_the_default_int8_model_decodes_a_warmed_call_turn(default_engine):
    # a pass that reads no logits (a row only writing its committed block) once crashed the int8 head
    turn = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Can you tell me about whitening?"}]
    sess = default_engine.session()
    with Scheduler(default_engine, max_batch=4, prefix_entries=0) as sch:
        sch.submit_prefill(default_engine.warm_request(sess, turn[:1], reasoning_effort="instant"), guess=False).done.result(60)
        got = sch.submit(default_engine.prepare(turn, session=sess, reasoning_effort="instant",
                                                max_tokens=24)).result_sync(60)
    assert got.text.strip() and got.finish_reason in ("stop", "length")


def test_a_pool_keeps_each_call_on_one_loop_and_spreads_new_calls_over_the_quietest(eng):
    import gc

    from engine.serve.scheduler_pool import SchedulerPool

    pool = SchedulerPool(eng, 2, max_batch=2, prefix_entries=0)
    a, b, c = eng.session(), eng.session(), eng.session()
    wa, wb = pool.worker_for(a), pool.worker_for(b)
    assert wa is not wb and pool.worker_for(a) is wa  # sticky, and the second call went to the idle loop
    assert pool.worker_for(c) is wa  # a tie: the first loop
    del b
    gc.collect()
    d = eng.session()
    assert pool.worker_for(d) is wb  # b's call ended: its loop is the quietest again
    b = eng.session()
    turn = [{"role": "user", "content": "Hi, can I book a cleaning?"}]
    with_pool = pool.start()
    try:
        tickets = [with_pool.submit(eng.prepare(turn, session=s, reasoning_effort="instant", max_tokens=8))
                   for s in (b, c, d)]
        results = [t.result_sync(60) for t in tickets]
    finally:
        pool.stop()
    assert len({r.raw_text for r in results}) == 1  # the same prompt decodes the same on every loop
    snap = pool.snapshot()
    assert snap["workers"] == 2 and snap["completed"] == 3 and len(snap["per_worker"]) == 2
