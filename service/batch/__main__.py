"""``python -m service.batch score ...``: the same as ``radscreen-batch``."""

import sys

from service.batch.cli import main

sys.exit(main())
