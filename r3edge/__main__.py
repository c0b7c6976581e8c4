"""``python -m r3edge``: the same command as the ``r3edge`` console script."""

import sys

from r3edge.cli import main

sys.exit(main())
