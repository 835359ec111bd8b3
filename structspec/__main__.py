"""``python -m structspec``: the ``structspec`` command line."""

import sys

from structspec.cli import main

sys.exit(main())
