"""Teacher labeling and student distillation."""
