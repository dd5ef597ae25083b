"""`TurnTimeline`: the moments of one caller turn and the bot's answer (no Pipecat import, so
reports can be built and diffed without loading the voice stack)."""

from __future__ import annotations

from dataclasses import dataclass, field

# The longest pause inside one caller turn: speech that resumes sooner continues the turn (the
# observer's false cut-offs, and the recording's utterances in truth.py).
TURN_PAUSE_MAX_S = 1.0


@dataclass
class TurnTimeline:
    """One caller turn and the bot's answer to it. Times are seconds on the observer's clock."""

    index: int
    user_started: float | None = None
    vad_started: float | None = None
    vad_stopped: float | None = None
    vad_stop_secs: float | None = None  # the VAD's configured silence wait
    turn_stopped: float | None = None
    transcript_final: float | None = None
    llm_request: float | None = None
    first_token: float | None = None
    first_answer_token: float | None = None
    first_speakable: float | None = None
    tts_request: float | None = None
    tts_first_audio: float | None = None
    bot_started: float | None = None
    first_bot_audio: float | None = None
    first_answer_audio: float | None = None  # the first bot audio of the answer proper (not a filler)
    bot_stopped: float | None = None
    tts_ttfb_ms: float | None = None
    user_text: str = ""
    bot_text: str = ""
    filler_text: str = ""
    reasoning: str = ""
    tool_calls: list[dict] = field(default_factory=list)
    engine: list[dict] = field(default_factory=list)  # the engine's metrics, one dict per call
    llm_calls: int = 0
    interrupted: bool = False  # the caller spoke again before this turn's answer finished
    late_transcript: bool = False  # some of user_text arrived after the LLM request
    # The pipeline ended this caller turn at a pause inside it and the caller went on: each time,
    # the answer moments start over (the caller waits for the answer to the whole turn), and what
    # the cut-off answers said and cost is kept here, out of the turn's numbers.
    false_cutoffs: int = 0
    cutoffs_heard: int = 0  # false cut-offs whose answer had started to play before the caller went on
    stt_cutoffs: int = 0  # the same, but with no pause in the turn: it ended before its transcript came
    vad_segments: int = 0  # VAD stops while the turn was open: more than one means a pause inside it
    llm_requests: list[float] = field(default_factory=list)  # every LLM request of the turn, cut-offs' too
    cut_off_text: str = ""
    cut_off_engine: list[dict] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        return self.first_bot_audio is not None
