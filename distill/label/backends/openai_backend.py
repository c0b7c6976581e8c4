"""OpenAI-compatible backend: chat completions with logprobs against vLLM, SGLang or TGI.

Every conversation is one HTTP request (bounded concurrency), so the server's continuous batching
does the batching and its prefix cache reuses what pairs share (R³A's round-1 conversation, the
judge's system prompt). The assistant prefix is continued, not re-generated
(``continue_final_message``, a vLLM/SGLang extension of the chat API).

Score read-out, Rank1-style: generate the reasoning with the judge's score marker as a stop string;
repair a reply cut off by ``max_tokens`` (the judge closes it and appends the marker); then ask for
one more token after the marker with ``logprobs`` and read the probabilities of the score tokens
there. The score-only judge's prompt already ends at its marker, so ``read_scores`` asks only for
that one token. The distribution is taken from ``top_logprobs`` (the server's top 20, the API's cap); a
score token outside it is given the smallest returned log-probability, an upper bound on its true
value, before the row is renormalised over the score tokens. A server that returns no logprobs is
an error naming the fix, never a silent uniform label.

Several servers (``base_url`` a list) are one :class:`r3edge.distill.label.pool.ServerPool`: each
pair's requests go to the server with the fewest in flight, and transient failures (HTTP 408/429/5xx,
connection errors, timeouts) mark that server down and run the pair again on another (one server: the same
one, after a backoff). Anything else fails the run at once with the server's message.
"""

from __future__ import annotations

import http.client
import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence

import numpy as np

from r3edge.core.errors import InvalidInput, R3EdgeError
from r3edge.distill.label.backends import Conversation, Generation
from r3edge.distill.label.pool import DEFAULT_MAX_IN_FLIGHT, ServerDown, ServerPool

TOP_LOGPROBS = 20
RETRY_STATUS = {408, 429, 500, 502, 503, 504}


class OpenAIBackend:
    name = "openai"

    def __init__(self, teacher_config, base_url: str | Sequence[str] | None = None, *,
                 max_concurrency: int = DEFAULT_MAX_IN_FLIGHT, timeout_s: float = 600.0, retries: int = 5,
                 backoff_s: float = 1.0, log: Callable[[str], None] | None = None):
        urls = [base_url] if isinstance(base_url, str) else list(base_url or [teacher_config.base_url or ""])
        self.model = teacher_config.served_model or teacher_config.model.pretrained
        if not self.model:
            raise InvalidInput(f"teacher config {teacher_config.name!r} names no model for the server",
                              "set 'served_model' (the name the server lists at /v1/models)")
        self.params = teacher_config.generation
        self.timeout_s = timeout_s
        # max_concurrency: calls in flight per server (a pair's requests are one call)
        self.servers = ServerPool(urls, max_in_flight=max_concurrency, retries=retries, backoff_s=backoff_s, log=log)
        self.base_url = self.servers.urls[0]
        try:
            for url in self.servers.urls:
                self._check_model(url)
        except BaseException:
            self.servers.close()
            raise

    def close(self) -> None:
        self.servers.close()

    def server_stats(self) -> dict[str, dict]:
        """Per server: calls answered and failed (:meth:`ServerPool.stats`)."""
        return self.servers.stats()

    # -- HTTP -------------------------------------------------------------------------------
    def _request(self, base: str, method: str, path: str, body: dict | None = None) -> dict:
        """One HTTP request, no retry: a failure that is the server's raises :class:`ServerDown` (the pool
        retries the call), any other fails the run with the server's message."""
        url = f"{base}{path}"
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            if exc.code in RETRY_STATUS:
                raise ServerDown(base, f"HTTP {exc.code}: {detail[:200]}") from exc
            raise InvalidInput(f"{method} {url} answered HTTP {exc.code}: {detail}", _fix_for(exc.code, self.model)) from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
            # connection refused or reset, a reply cut off (IncompleteRead), a timeout: the server is gone or stuck
            raise ServerDown(base, f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}") from exc

    def _check_model(self, base: str) -> None:
        listed = [m.get("id") for m in
                  self.servers.call(lambda url: self._request(url, "GET", "/models"), only=base).get("data", [])]
        if self.model not in listed:
            raise InvalidInput(f"the server at {base} serves {listed}, not {self.model!r}",
                              "set 'served_model' in the teacher config to one of those names")

    def _chat(self, conv: Conversation, *, base: str | None = None, **kw) -> dict:
        """One chat completion on server ``base`` (default: the first), the assistant prefix continued."""
        messages, prefix = conv
        body = {"model": self.model, "messages": [*messages, {"role": "assistant", "content": prefix}],
                "add_generation_prompt": False, "continue_final_message": True, **kw}
        if not prefix:  # an empty assistant turn would be rendered as a finished (empty) reply
            body.update(messages=list(messages), add_generation_prompt=True, continue_final_message=False)
        return self._request(base or self.base_url, "POST", "/chat/completions", body)

    def _map(self, fn, items):
        """``fn(item, base_url)`` per item, each one call of the server pool (retried elsewhere if its server fails)."""
        return self.servers.map(fn, items)

    # -- the three calls ----------------------------------------------------------------------
    def generate(self, convs: Sequence[Conversation], max_new_tokens: int, stop: Sequence[str]) -> list[Generation]:
        def one(conv, base):
            t0 = time.perf_counter()
            r = self._chat(conv, base=base, max_tokens=max_new_tokens, temperature=self.params.temperature,
                           stop=list(stop) or None, include_stop_str_in_output=True)
            return _generation(r, 0, time.perf_counter() - t0)

        return self._map(one, convs)

    def sample(self, convs: Sequence[Conversation], max_new_tokens: int, stop: Sequence[str], k: int,
               temperature: float) -> list[list[Generation]]:
        def one(conv, base):
            t0 = time.perf_counter()
            r = self._chat(conv, base=base, max_tokens=max_new_tokens, temperature=temperature, n=k, logprobs=True,
                           stop=list(stop) or None, include_stop_str_in_output=True)
            share = (time.perf_counter() - t0) / k
            gens = []
            for i in range(len(r["choices"])):
                content = (r["choices"][i].get("logprobs") or {}).get("content")
                if content is None:
                    raise _no_logprobs(base)
                gens.append(_generation(r, i, share, logprob=float(sum(t["logprob"] for t in content))))
            return gens

        return self._map(one, convs)

    def generate_and_score(self, convs: Sequence[Conversation], max_new_tokens: int, score_open: str,
                           repair: Callable[[str], tuple[str, bool]], score_tokens: Sequence[str],
                           ) -> tuple[list[Generation], np.ndarray]:
        def one(conv, base):  # both requests on one server: the read reuses the generation's prefix cache
            messages, prefix = conv
            t0 = time.perf_counter()
            r = self._chat(conv, base=base, max_tokens=max_new_tokens, temperature=self.params.temperature,
                           stop=[score_open], include_stop_str_in_output=True)
            gen = _generation(r, 0, 0.0)
            reply, repaired = repair(prefix + gen.text)
            _, probs = self._read((messages, reply), score_tokens, base)
            latency = time.perf_counter() - t0
            return (Generation(text=gen.text, prompt_tokens=gen.prompt_tokens, completion_tokens=gen.completion_tokens,
                               latency_s=latency, repaired=repaired), probs)

        results = self._map(one, convs)
        return [g for g, _ in results], np.array([p for _, p in results], dtype=np.float64)

    def read_scores(self, convs: Sequence[Conversation], score_tokens: Sequence[str],
                    ) -> tuple[list[Generation], np.ndarray]:
        """The score tokens' distribution right after each conversation (prefill only: one token is
        asked for, to carry its logprobs; nothing generated is kept). The assistant prefix, which
        ends at the judge's marker, is continued with ``continue_final_message``."""
        def one(conv, base):
            t0 = time.perf_counter()
            r, probs = self._read(conv, score_tokens, base)
            gen = _generation(r, 0, time.perf_counter() - t0)
            return Generation(text="", prompt_tokens=gen.prompt_tokens, completion_tokens=0, latency_s=gen.latency_s), probs

        results = self._map(one, convs)
        return [g for g, _ in results], np.array([p for _, p in results], dtype=np.float64)

    def _read(self, conv: Conversation, score_tokens: Sequence[str], base: str | None = None) -> tuple[dict, np.ndarray]:
        """One greedy token after ``conv`` with ``top_logprobs`` on server ``base`` (default: the first): the
        response and the score tokens' probabilities."""
        base = base or self.base_url
        r = self._chat(conv, base=base, max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=TOP_LOGPROBS)
        return r, _score_probs(r, score_tokens, base)


def _generation(resp: dict, i: int, latency_s: float, logprob: float | None = None) -> Generation:
    choice = resp["choices"][i]
    usage = resp.get("usage") or {}
    n = len(resp["choices"])
    completion = usage.get("completion_tokens", 0) // max(n, 1)
    return Generation(text=choice["message"].get("content") or "", prompt_tokens=int(usage.get("prompt_tokens", 0)),
                      completion_tokens=int(completion), latency_s=latency_s, logprob=logprob)


def _score_probs(resp: dict, score_tokens: Sequence[str], base_url: str) -> np.ndarray:
    """p(score token) at the position after the marker, renormalised over the score tokens."""
    content = (resp["choices"][0].get("logprobs") or {}).get("content")
    if not content:
        raise _no_logprobs(base_url)
    top = content[0].get("top_logprobs") or []
    if not top:
        raise _no_logprobs(base_url)
    by_token: dict[str, float] = {}
    for t in top:
        key = t["token"].strip()
        by_token[key] = max(by_token.get(key, -math.inf), float(t["logprob"]))
    floor = min(float(t["logprob"]) for t in top)  # anything outside the top-k is at most this likely
    lp = np.array([by_token.get(tok.strip(), floor) for tok in score_tokens], dtype=np.float64)  # " true" is "true"
    p = np.exp(lp - lp.max())
    return p / p.sum()


def _no_logprobs(base_url: str) -> R3EdgeError:
    return InvalidInput(f"the server at {base_url} returned no logprobs, so the teacher's score distribution cannot be read",
                       "use a server that supports logprobs/top_logprobs in chat completions (vLLM, SGLang), "
                       "and do not start it with logprobs disabled")


def _fix_for(status: int, model: str) -> str:
    if status == 404:
        return f"check --base-url (it should end in /v1) and that the server serves {model!r}"
    if status == 400:
        return ("the server refused the request: check max_model_len against the prompt + generation budget, "
                "and that its chat template accepts continue_final_message")
    return "see the server's log"
