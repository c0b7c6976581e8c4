"""Shipped YAML configs (teacher/, student/, serve/), found with importlib.resources: see r3edge.core.config."""
