"""A student's prefix-reuse graphs in ONNX Runtime (torch-free; the server loads it).

:class:`OnnxPrefixRunner` is a :class:`r3edge.core.scoring.PrefixRunner`: the prefix graph runs the
template head + query of a request once, and the candidate graph scores each micro-batch of
document + tail suffixes after its state (see :data:`r3edge.core.artifact.PREFIX_GRAPHS` for the
graphs' contract). The state is a causal student's key/value cache (``layers`` > 0: the prefix
graph's ``present_*`` outputs feed the candidate graph's ``past_*`` inputs) or the tensors a
manifest entry names under ``state`` (a cosine student's ``query_embedding``, the same name on
both sides). On the CPU the state is a list of numpy arrays between the two calls; on a GPU provider
it stays on the device as ONNX Runtime ``OrtValue`` objects (``run_with_ort_values``), so a causal student's
key/value cache is not copied to the host and back for every candidate micro-batch of a request.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from r3edge.core.artifact import MANIFEST_FILE, OUTPUT_NAME, PREFIX_GRAPHS, cache_names, check_inputs
from r3edge.core.errors import FormatError, NotFound, R3EdgeError, require


def state_names(entry: dict) -> tuple[list[str], list[str]]:
    """``(prefix graph outputs, candidate graph state inputs)`` of a manifest prefix-reuse entry."""
    if entry.get("state"):
        return list(entry["state"]), list(entry["state"])
    layers = int(entry["layers"])
    return cache_names("present", layers), cache_names("past", layers)


def prefix_files(manifest: dict, variant: str) -> dict | None:
    """The manifest's prefix-reuse entry for ``variant`` (``prefix``, ``candidate``, ``layers``, and
    ``state`` where the state is not a key/value cache), if any."""
    entry = (manifest.get(PREFIX_GRAPHS) or {}).get(variant)
    if entry is None:
        return None
    if not isinstance(entry, dict) or not {"prefix", "candidate", "layers"} <= set(entry):
        raise FormatError(f"{MANIFEST_FILE}: {PREFIX_GRAPHS}[{variant!r}] is {entry!r}",
                          "re-run `r3edge export --prefix-reuse`")
    return entry


class OnnxPrefixRunner:
    """The prefix graph and the candidate graph of one artifact variant, checked when opened."""

    def __init__(self, artifact_dir: str | Path, entry: dict, make_session, n_labels: int):
        artifact_dir = Path(artifact_dir)
        self.layers = int(entry["layers"])
        self.present, self.past = state_names(entry)
        self.files = {k: entry[k] for k in ("prefix", "candidate")}
        sessions = {}
        for key, name in self.files.items():
            path = artifact_dir / name
            if not path.is_file():
                raise NotFound(f"{path} listed in {MANIFEST_FILE} is missing", "re-run `r3edge export --prefix-reuse`")
            sessions[key] = make_session(path)
        self.prefix_session, self.candidate_session = sessions["prefix"], sessions["candidate"]
        self._check_contract(n_labels)
        #: keep the state on the device between the prefix and candidate calls (an ONNX Runtime session led by
        #: a GPU provider; OpenVINO's IR sessions, which reuse this runner, run on the CPU)
        providers = getattr(self.prefix_session, "get_providers", lambda: ["CPUExecutionProvider"])()
        self.state_on_device = providers[0] != "CPUExecutionProvider"

    def _check_contract(self, n_labels: int) -> None:
        def names(values):
            return [v.name for v in values]

        pre, cand = self.prefix_session, self.candidate_session
        problems = []
        if names(pre.get_inputs()) != ["input_ids"] or names(pre.get_outputs()) != self.present:
            problems.append(f"prefix graph {names(pre.get_inputs())} -> {names(pre.get_outputs())}")
        if sorted(names(cand.get_inputs())) != sorted(["input_ids", "attention_mask", *self.past]):
            problems.append(f"candidate graph inputs {names(cand.get_inputs())}")
        outs = cand.get_outputs()
        if names(outs) != [OUTPUT_NAME] or (isinstance(outs[0].shape[1], int) and outs[0].shape[1] != n_labels):
            problems.append(f"candidate graph outputs {[(o.name, o.shape) for o in outs]}")
        if problems:
            raise FormatError(f"the prefix-reuse graphs break their contract ({'; '.join(problems)})",
                              "re-run `r3edge export --prefix-reuse`")

    def prefix(self, input_ids: np.ndarray) -> list[np.ndarray]:
        ids = np.ascontiguousarray(input_ids, dtype=np.int64)
        if ids.ndim != 2 or ids.shape[0] != 1:
            raise R3EdgeError(f"the prefix graph takes one prefix [1, P], got {ids.shape}", "score through score_pairs")
        if self.state_on_device:
            ort = require("onnxruntime", "serve")
            return self.prefix_session.run_with_ort_values(self.present, {"input_ids": ort.OrtValue.ortvalue_from_numpy(ids)})
        return self.prefix_session.run(self.present, {"input_ids": ids})

    def candidates(self, cache: list, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        ids, mask = check_inputs(input_ids, attention_mask)
        if self.state_on_device:
            ort = require("onnxruntime", "serve")
            feeds = {"input_ids": ort.OrtValue.ortvalue_from_numpy(ids),
                     "attention_mask": ort.OrtValue.ortvalue_from_numpy(mask), **dict(zip(self.past, cache, strict=True))}
            (out,) = self.candidate_session.run_with_ort_values([OUTPUT_NAME], feeds)
            return np.asarray(out.numpy(), dtype=np.float32)
        feeds = {"input_ids": ids, "attention_mask": mask, **dict(zip(self.past, cache, strict=True))}
        (out,) = self.candidate_session.run([OUTPUT_NAME], feeds)
        return np.asarray(out, dtype=np.float32)

    def close(self) -> None:
        self.prefix_session = self.candidate_session = None
