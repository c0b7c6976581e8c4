"""Teacher labelling and student distillation, in four rooms by stage.

- :mod:`r3edge.distill.data`: pairs to label (BM25 pooling, the synthetic UGC set, dataset loaders).
- :mod:`r3edge.distill.label`: a judge labels pairs (driver, judges, engine backends, journal; judges as rerankers).
- :mod:`r3edge.distill.teacher`: training the judge itself (SFT cold start, GRPO, rewards, traces).
- :mod:`r3edge.distill.student`: training the student on the teacher's label distribution (losses, trainer, evaluation).

:mod:`r3edge.distill.hf_trainer` (progress, time budgets, finite-loss guard around transformers' Trainer) is
shared by both trainers. The import contracts in pyproject.toml keep the flow one way: data <- label <- teacher,
and the student never imports teacher training.
"""
