"""``python -m hcomm_cffi.run -n 4 -- python script.py``: an alias of ``hcomm run``."""
from __future__ import annotations

import sys

from .launch.runner import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
