"""``python -m services ...``: the service's CLI commands (serve, submit, admin)."""

import sys

from services.cli import main

sys.exit(main())
