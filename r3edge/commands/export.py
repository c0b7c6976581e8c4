"""TODO: export (placeholder until its stage lands)."""


def configure(parser):
    pass


def run(args):
    raise NotImplementedError("export")
