"""TODO: rerank (placeholder until its stage lands)."""


def configure(parser):
    pass


def run(args):
    raise NotImplementedError("rerank")
