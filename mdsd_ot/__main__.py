"""``python -m mdsd_ot``: the ``mdsd-ot`` command line (see :mod:`mdsd_ot.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
