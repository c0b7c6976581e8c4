"""One module per CLI subcommand: ``configure(parser)`` and ``run(args) -> int``."""
