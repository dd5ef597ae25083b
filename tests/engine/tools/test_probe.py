"""The decoding-policy probe (python -m engine.train probe): policy parsing, scoring, bad corpora,
and one run on a tiny model whose script is (or is not) what it decodes."""

from __future__ import annotations

import json

import pytest

from engine import Engine
from engine.runtime.sequence import DecodeParams
from engine.train.__main__ import main
from engine.train.probe import Policy, normalise, parse_policies, pick_records, probe
from tests.tiny_models import save_tiny


def test_policies_parse_and_bad_ones_say_why():
    assert parse_policies("0.3:2, 0.9:4,ar", block=4) == [Policy(0.3, 2, 4), Policy(0.9, 4, 4), Policy(1.0, 1, 1)]
    assert [p.name for p in parse_policies("0.9:3,ar", block=4)] == ["0.9:3", "ar"]
    for bad, why in [("0.9", "THRESHOLD:STEP_CAP"), ("1.5:2", "threshold in 0..1"), ("0.9:5", "step cap in 1..4"),
                     ("", "no policies")]:
        with pytest.raises(ValueError, match=why):
            parse_policies(bad, block=4)


def test_scoring_ignores_the_end_marker_and_case_only():
    assert normalise("You're booked, Andrea.<|im_end|>") == normalise("you're booked, andrea.")
    assert normalise("You're booked, Andrea.") != normalise("You're booked, Andrew.")


def test_a_corpus_that_is_missing_or_malformed_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="voice_agent.dialogues"):
        pick_records(tmp_path / "train.jsonl", 3, 0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "target": "b"}\n{"prompt": "a"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: a record needs"):
        pick_records(bad, 3, 0)
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match="not a JSON line"):
        pick_records(bad, 3, 0)
    assert main(["probe", "--data", str(tmp_path / "nowhere")]) == 2


def test_records_with_a_thinking_note_are_left_out(tmp_path):
    f = tmp_path / "train.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"p{i}", "target": "t", "think": i % 2 == 0}) + "\n" for i in range(6)))
    assert sorted(r["prompt"] for r in pick_records(f, 10, 0)) == ["p1", "p3", "p5"]


def test_the_probe_counts_exact_turns_per_policy_on_a_tiny_model(tmp_path):
    eng = Engine.load(save_tiny(tmp_path / "qwen2", "qwen2", seed=1), precision="fp32", family="smollm2-dllm",
                      block_size=4)
    prompt = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n"
    tokens = eng.tokenizer.encode(prompt, add_special_tokens=False).ids
    req = eng.request_for_tokens(tokens, DecodeParams(block_size=1, threshold=1.0, max_steps_per_block=1, max_tokens=80))
    own = next(ev.result for ev in eng.run(req) if ev.type == "done")
    records = [{"prompt": prompt, "target": own.raw_text or own.text}, {"prompt": prompt, "target": "something else"}]
    ar, capped = probe(eng, records, parse_policies("ar,0.3:2", block=4))
    assert (ar["policy"], ar["exact"], ar["n"]) == ("ar", 1, 2)       # its own AR output matches, the other not
    assert ar["tokens_per_forward"] <= 1.05                              # AR: one token a pass
    assert capped["policy"] == "0.3:2" and capped["exact"] <= 1 and capped["tokens_per_forward"] >= 1.9


def test_a_named_adapter_that_does_not_exist_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        Engine.load("default", adapter=tmp_path / "missing.safetensors")
