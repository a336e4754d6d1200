"""``python -m specnb`` is the ``specnb`` command."""

import sys

from specnb.app.cli import main

sys.exit(main())
