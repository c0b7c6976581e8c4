"""Generation backends for teacher judges.

A backend turns chat messages into text and reads next-token probabilities; it knows nothing about
rubrics. Only the in-process transformers backend exists today; an OpenAI-compatible client (vLLM,
SGLang) would be a second module exposing the same methods (``render``, ``generate``,
``generate_and_score``), provided its server returns prompt logprobs for the score tokens.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Generation:
    text: str                # decoded completion, special tokens removed
    prompt_tokens: int
    completion_tokens: int
    latency_s: float         # this item's share of its batch's wall time


def load_backend(teacher_config):
    """The backend for a :class:`r3edge.core.config.TeacherConfig` (imports torch lazily)."""
    from r3edge.distill.backends.transformers_backend import TransformersBackend

    return TransformersBackend(teacher_config.model, teacher_config.generation)
