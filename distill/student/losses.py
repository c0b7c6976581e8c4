"""Ranking losses over the candidates of one query, added to the pointwise KL of ``r3edge train``.

A reranker is judged by the order it gives a query's candidates, and a pointwise loss on each pair
alone does not see that order (Rank-DistiLLM; arXiv 2603.03010: ranking losses beat pointwise ones
for distilled rerankers). Both losses here read the student's three label logits through the
expected score ``Σ softmax(logits)·label_values``, the number the server ranks by, so the student
still outputs label logits and export, serving and the scoring contract do not change.

``groups`` holds one integer per row, the row's query: rows of the same query in a batch form a
group (batches of whole-query groups come from :class:`r3edge.distill.student.train.QueryGroupSampler`);
a group of one row adds nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def expected_scores(probs: torch.Tensor, label_values: torch.Tensor) -> torch.Tensor:
    """``Σ p·value`` per row: the relevance score a distribution over labels stands for."""
    return probs @ label_values.to(probs.dtype)


def listwise_kl(student: torch.Tensor, teacher: torch.Tensor, groups: torch.Tensor,
                temperature: float = 1.0) -> torch.Tensor:
    """Mean over groups of KL(softmax(teacher / T) ‖ softmax(student / T)) across a group's candidates.

    ``student`` and ``teacher`` are expected scores (``[n]``). Zero (with a gradient path) when no
    group has two rows.
    """
    losses = []
    for g in torch.unique(groups):
        rows = groups == g
        if int(rows.sum()) < 2:
            continue
        target = F.softmax(teacher[rows] / temperature, dim=-1)
        losses.append(F.kl_div(F.log_softmax(student[rows] / temperature, dim=-1), target, reduction="sum"))
    return torch.stack(losses).mean() if losses else student.sum() * 0


def margin_mse(student: torch.Tensor, teacher: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Mean over every pair (i, j) of one query of ``((s_i - s_j) - (t_i - t_j))²`` (MarginMSE,
    Hofstätter et al.): the student matches the teacher's score margins, not its absolute scores."""
    same = groups.unsqueeze(0) == groups.unsqueeze(1)
    pairs = torch.triu(same, diagonal=1)
    if not bool(pairs.any()):
        return student.sum() * 0
    gap = (student.unsqueeze(1) - student.unsqueeze(0)) - (teacher.unsqueeze(1) - teacher.unsqueeze(0))
    return gap[pairs].pow(2).mean()
