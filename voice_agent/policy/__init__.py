"""What the agent does with a caller's words, for any scenario: argument kinds and their parsers
(kinds.py, calendar_words.py)."""
