"""``python -m benchmarks``: the bench run (``make bench``)."""

import sys

from benchmarks import main

sys.exit(main())
