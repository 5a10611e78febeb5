"""``python -m metadp`` runs the command-line interface."""

import sys

from metadp.cli import main

sys.exit(main())
