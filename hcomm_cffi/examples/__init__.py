"""Runnable examples: ``hcomm run -n 4 -- python -m hcomm_cffi.examples.allreduce``."""
