"""``python -m hcomm_cffi`` runs the ``hcomm`` command."""
import sys

from .cli import main

sys.exit(main())
