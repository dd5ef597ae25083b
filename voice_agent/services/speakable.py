"""Keep markup out of speech: a small model sometimes leaks tag or JSON fragments (`<name>`,
`{"tool_call"`) into its answer, and a TTS reads them out as noise. Streamed text goes through one
filter per turn, so a tag split across chunks is still dropped."""

from __future__ import annotations

import re

MARKUP = str.maketrans("", "", '{}[]"\\`*#|_>')  # a '>' outside a tag is an arrow's tail ("->")
# The call markup's own words, glued to speech by a mangled tag ("Istoolcall?", seed-6 gen_059)
TOOL_WORDS = re.compile(r"tool ?calls?", re.IGNORECASE)
MAX_TAG_CHARS = 32  # an unclosed '<' longer than this was not a tag: stop swallowing text


class SpeakableFilter:
    def __init__(self) -> None:
        self.tag = ""  # text after an unclosed '<'
        self.in_tag = False

    def feed(self, text: str) -> str:
        out = []
        for c in text:
            if self.in_tag:
                if c == ">" or len(self.tag) >= MAX_TAG_CHARS:
                    self.in_tag, self.tag = False, ""
                else:
                    self.tag += c
                continue
            if c == "<":
                self.in_tag = True
                continue
            out.append(c)
        return TOOL_WORDS.sub("", "".join(out).translate(MARKUP))
