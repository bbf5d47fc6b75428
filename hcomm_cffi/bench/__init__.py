"""``hcomm bench``: hccl_test / nccl-tests style collective benchmarks.

Modules (each small, importable on its own):

* :mod:`.sizes`    -- ``-b/-e/-f/-i`` parsing (K/M/G = 2^10/2^20/2^30) and per-op buffer layouts;
* :mod:`.factors`  -- operation names, the S numerator of algbw and nccl-tests busbw factors;
* :mod:`.check`    -- hccl_test value patterns, expected outputs, wrong-element counting and the
  automatic disabling of the check when the expected value overflows or loses precision;
* :mod:`.ops`      -- the adapter that executes one collective (binding natives today, Comm API later);
* :mod:`.runner`   -- the per-rank sweep (warm-up, timed loop, check, cross-rank combination);
* :mod:`.report`   -- the table, JSON/CSV files, the plot and the terminal progress bar.

The ``hcomm bench`` command itself lives in :mod:`hcomm_cffi.cli.bench`.
"""
from __future__ import annotations

from .factors import OPS, busbw_factor, parse_op
from .sizes import SizeError, parse_size, size_sweep

__all__ = ["OPS", "busbw_factor", "parse_op", "SizeError", "parse_size", "size_sweep"]
