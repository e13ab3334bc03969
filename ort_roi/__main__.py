"""``python -m ort_roi``: the ``ort-roi`` command line."""

import sys

from .cli.main import main

sys.exit(main())
