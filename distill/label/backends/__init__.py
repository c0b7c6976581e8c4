"""Generation backends for teacher judges.

A backend turns conversations into text and reads next-token probabilities; it knows nothing about
rubrics. A conversation is ``(messages, assistant_prefix)``: the chat so far and the start of the
assistant's reply, which the backend continues (the prefix is prefilled, never generated). Two
backends implement the same four calls:

* ``transformers`` — in-process generation (``transformers_backend``);
* ``openai`` — any OpenAI-compatible server with logprobs: vLLM, SGLang, TGI (``openai_backend``).

``generate`` (intent round), ``generate_and_score`` (reasoning up to the judge's score marker, then
the distribution over the score tokens there, Rank1-style, with cut-off reasoning repaired by the
judge), ``read_scores`` (no generation: the distribution over the score tokens right after the
conversation, whose prefix already ends at the marker; the score-only judge) and ``sample`` (K
trajectories per conversation with their log-likelihoods, for Retro*).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

Messages = list[dict[str, str]]
Conversation = tuple[Messages, str]  # (messages, assistant reply prefix)


@dataclass(frozen=True)
class Generation:
    text: str                # the generated continuation of the prefix, special tokens removed
    prompt_tokens: int
    completion_tokens: int
    latency_s: float         # this item's share of its batch's (or request's) wall time
    logprob: float | None = None   # sum of the generated tokens' log-probabilities (sampling)
    repaired: bool = False   # the score was read after the judge repaired a cut-off reasoning


class Backend(Protocol):
    name: str

    def generate(self, convs: Sequence[Conversation], max_new_tokens: int, stop: Sequence[str]) -> list[Generation]: ...

    def generate_and_score(self, convs: Sequence[Conversation], max_new_tokens: int, score_open: str,
                           repair: Callable[[str], tuple[str, bool]], score_tokens: Sequence[str],
                           ) -> tuple[list[Generation], np.ndarray]: ...

    def read_scores(self, convs: Sequence[Conversation], score_tokens: Sequence[str],
                    ) -> tuple[list[Generation], np.ndarray]: ...

    def sample(self, convs: Sequence[Conversation], max_new_tokens: int, stop: Sequence[str], k: int,
               temperature: float) -> list[list[Generation]]: ...

    def close(self) -> None: ...


def load_backend(teacher_config, base_url: str | Sequence[str] | None = None, *, max_in_flight: int | None = None,
                 log: Callable[[str], None] | None = None) -> Backend:
    """The backend named by a :class:`r3edge.core.config.TeacherConfig` (torch only for transformers).

    For the openai backend ``base_url`` is one server or several (:mod:`r3edge.distill.label.pool`),
    ``max_in_flight`` the calls in flight per server, and ``log`` hears when a server goes down or comes back."""
    if teacher_config.backend == "openai":
        from r3edge.distill.label.backends.openai_backend import OpenAIBackend

        extra = {"max_concurrency": max_in_flight} if max_in_flight is not None else {}
        return OpenAIBackend(teacher_config, base_url=base_url, log=log, **extra)
    from r3edge.distill.label.backends.transformers_backend import TransformersBackend

    return TransformersBackend(teacher_config.model, teacher_config.generation)
