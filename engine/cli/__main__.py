"""``python -m eddies.engine.cli``: the ``eddies`` command."""

import sys

from eddies.engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
