"""``python -m specnb`` is the ``specnb`` command."""

import sys

from specnb.cli import main

sys.exit(main())
