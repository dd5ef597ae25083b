"""Serving: the batching scheduler (and its pool), the OpenAI-compatible server, the shared CLI flags."""
