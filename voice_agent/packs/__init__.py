"""Scenario packs' tool backends: a Python class in the pack (`Backend`) or a webhook, made total by
`bind_tools`, opened per call by `open_backend` (docs/scenarios.md)."""

from voice_agent.packs.backend import Backend, ToolError, bind_tools
from voice_agent.packs.loading import PackError, open_backend, pack_module
from voice_agent.packs.webhook import WebhookBackend

__all__ = ["Backend", "PackError", "ToolError", "WebhookBackend", "bind_tools", "open_backend", "pack_module"]
