"""A shipped teacher config with a few fields changed, written where a labelling run can read it.

Studies label with a judge the repository ships, but on other weights, another engine or other
budgets (a converted model directory, a vLLM server's address, shorter rounds). Writing the changed
config next to the run keeps what was measured reproducible from the run's own files, and this one
function keeps how such a variant is made the same in every study.
"""

from __future__ import annotations

from pathlib import Path


def write_teacher_variant(path: str | Path, config: str, *, model: dict | None = None, generation: dict | None = None,
                          **fields) -> Path:
    """``config`` (a name under configs/teacher or a path) with ``model`` and ``generation`` merged into those
    blocks and every other field set (``backend``, ``base_url``, ``served_model``, ``name``...; a None value
    leaves the field as it is), validated by :class:`~r3edge.core.config.TeacherConfig` and written as YAML to
    ``path``."""
    import yaml

    from r3edge.core.config import TeacherConfig, load_yaml

    cfg = load_yaml(config, TeacherConfig).model_dump(mode="json", exclude_none=True)
    cfg["model"].update(model or {})
    cfg["generation"].update(generation or {})
    cfg.update({k: v for k, v in fields.items() if v is not None})
    TeacherConfig.model_validate(cfg)  # a misspelt field fails here, not in the labelling run
    path = Path(path)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path
