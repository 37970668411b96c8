"""``python -m tidemark.bench``: the same as ``tidemark bench``."""

import sys

from tidemark.bench import main

sys.exit(main())
