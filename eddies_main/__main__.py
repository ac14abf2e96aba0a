"""``python -m eddies``: the ``eddies`` command (:func:`eddies.engine.cli.main`).

This directory is installed as the ``eddies`` package itself (see pyproject.toml); it holds
no ``__init__.py``, so ``eddies`` stays a namespace package over engine, modules, router and
sources.
"""

import sys

from eddies.engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
