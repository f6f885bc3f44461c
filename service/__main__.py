"""``python -m service ...`` = the ``radscreen`` console script."""

import sys

from service.cli import main

sys.exit(main())
