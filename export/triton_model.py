"""The Triton Python-backend model of ``r3edge export --format triton``: text in, token ids out.

Copied as ``<repository>/r3edge_tokenizer/1/model.py``, beside the artifact's ``scorer.json`` and
``tokenizer.json``. It renders the template and tokenises through :class:`r3edge.core.scoring.Scorer`,
the scoring contract itself (no copy of the template here), so the Python backend's environment
needs r3edge with its torch-free core (``pip install r3edge``: tokenizers and numpy). Every pair is
padded to the contract's ``max_total_tokens`` so that requests of any length have one shape and the
scorer model's dynamic batcher can merge them. Over-long queries and documents follow the
``overflow`` parameter of config.pbtxt (``truncate``, the scoring contract's default, or ``reject``).

Not run under a Triton server on r3edge's machines; ``tests/test_triton.py`` runs it against the
artifact's tokenizer with a stand-in for ``triton_python_backend_utils`` (which exists only inside
Triton).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from r3edge.core.errors import InvalidInput, R3EdgeError
from r3edge.core.scoring import DEFAULT_OVERFLOW, Scorer


def _texts(array: np.ndarray) -> list[str]:
    """A TYPE_STRING tensor (numpy object array of bytes) as Python strings."""
    return [x.decode("utf-8") if isinstance(x, bytes) else str(x) for x in array.reshape(-1)]


class TritonPythonModel:
    """QUERY, DOCUMENT ([batch, 1] strings) -> input_ids, attention_mask ([batch, max_total_tokens] int64)."""

    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.scorer = Scorer.load(Path(args["model_repository"]) / args["model_version"])
        if "truncation" in params:  # the old name: refused, never silently ignored
            raise InvalidInput("config.pbtxt sets the parameter 'truncation', which is now called 'overflow'",
                               "rename it, or re-run `r3edge export --format triton`", field="overflow")
        self.overflow = params.get("overflow", DEFAULT_OVERFLOW)
        self.width = int(params.get("pad_to", self.scorer.spec.max_total_tokens))

    def encode(self, queries: list[str], documents: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """The scorer's ids for the pairs, padded to the fixed width on the contract's side."""
        enc = self.scorer.encode_batch(queries, documents, overflow=self.overflow)
        return self.scorer.collate(enc, width=self.width)

    def execute(self, requests: list) -> list:
        responses = []
        for request in requests:
            queries = _texts(pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy())
            documents = _texts(pb_utils.get_input_tensor_by_name(request, "DOCUMENT").as_numpy())
            try:
                ids, mask = self.encode(queries, documents)
            except R3EdgeError as exc:  # an over-long pair under overflow "reject": that request fails alone
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(exc))))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("input_ids", ids), pb_utils.Tensor("attention_mask", mask)]))
        return responses

    def finalize(self) -> None:
        self.scorer = None
