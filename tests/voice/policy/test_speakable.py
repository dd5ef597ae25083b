"""Markup never reaches the TTS, even when a tag is split across streamed chunks."""

from voice_agent.services.speakable import SpeakableFilter


def _speak(chunks: list[str]) -> str:
    f = SpeakableFilter()
    return "".join(f.feed(c) for c in chunks)


def test_tags_and_json_punctuation_are_dropped_across_chunks():
    assert _speak(["Sure, <na", "me> Maria, see you {\"at\": ", "10}."]) == "Sure,  Maria, see you at: 10."
    assert _speak(["<tool>\n", '{"name": wants_book"'] ) == "\nname: wantsbook"


def test_plain_speech_passes_unchanged():
    text = "Hi! We're open Monday to Friday, 9 am to 5 pm. Can I help with anything else?"
    assert _speak([text[:20], text[20:]]) == text


def test_an_unclosed_angle_bracket_does_not_swallow_the_rest_of_the_answer():
    out = _speak(["It costs < 50 dollars, and the visit takes about half an hour. See you then."])
    assert "See you then." in out


def test_the_call_markups_words_and_stray_arrows_are_dropped():
    # seed-6 gen_059: "No patient named Ahmed Ramirez -> Could have other full names. Istoolcall?"
    out = _speak(["No patient named Ahmed Ramirez -> Could have other full names. Is", "toolcall?"])
    assert "toolcall" not in out.lower() and ">" not in out
    assert _speak(["Your tool_call is ready"]) == "Your  is ready"
