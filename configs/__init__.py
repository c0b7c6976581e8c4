"""Shipped YAML configs (teacher/, student/, serve/, sft/), found with importlib.resources: see r3edge.core.config."""
