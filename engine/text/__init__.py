"""Text in and out: the chat format, tool-call parsing, the schema guide, grounding, a request's text rules."""
