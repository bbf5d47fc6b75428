"""``python -m hcomm_cffi.launch -n 4 -- python script.py``: an alias of ``hcomm run``."""
from __future__ import annotations

import sys

from .runner import main

if __name__ == "__main__":
    sys.exit(main())
