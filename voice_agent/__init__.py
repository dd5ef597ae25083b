"""The voice agent: a Pipecat cascade around the in-process diffusion engine."""

# OpenMP's wait policy has one home, engine/__init__.py; importing it sets the policy before torch loads.
import engine  # noqa: F401
