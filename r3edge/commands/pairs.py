"""TODO: pairs (placeholder until its stage lands)."""


def configure(parser):
    pass


def run(args):
    raise NotImplementedError("pairs")
