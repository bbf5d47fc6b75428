"""Time the two pieces of bootstrap work that used to grow quadratically (issue 46 items 7 and 13).

Run: ``python benchmarks/bench_files_scaling.py [--ranks 32768 --servers 32000]``.

* the rendezvous timeout message naming the missing ranks (``bootstrap.rendezvous.timeout_error``) at
  ``--ranks`` ranks, half of them missing;
* parsing a 1.2 ranktable of ``--servers`` one-device servers in one super pod (``plan.load_ranktable``),
  and of a quarter as many, to show the growth is linear.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from typing import List, Optional

from hcomm_cffi.bootstrap.rendezvous import timeout_error
from hcomm_cffi.plan import load_ranktable


def _ranktable(servers: int) -> str:
    table = {"version": "1.2", "status": "completed", "server_count": str(servers),
             "server_list": [{"server_id": f"s{i}", "device": [{"device_id": "0", "device_ip": "10.0.0.1",
                                                               "rank_id": str(i)}]} for i in range(servers)],
             "super_pod_list": [{"super_pod_id": "p0",
                                 "server_list": [{"server_id": f"s{i}"} for i in range(servers)]}]}
    fd, path = tempfile.mkstemp(suffix=".json", prefix="hcomm-bench-ranktable-")
    with os.fdopen(fd, "w") as fh:
        json.dump(table, fh)
    return path


def main(argv: Optional[List[str]] = None) -> int:
    """Print the time of each piece."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ranks", type=int, default=32768)
    ap.add_argument("--servers", type=int, default=32000)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    timeout_error("file rendezvous", list(range(0, args.ranks, 2)), args.ranks, 120.0, "HCCL_CONNECT_TIMEOUT")
    print(f"rendezvous timeout message, {args.ranks} ranks, {args.ranks // 2} missing: "
          f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
    for servers in (args.servers // 4, args.servers):
        path = _ranktable(servers)
        try:
            t0 = time.perf_counter()
            load_ranktable(path)
            print(f"ranktable of {servers} servers ({os.path.getsize(path) >> 10} KiB): "
                  f"{(time.perf_counter() - t0) * 1e3:.1f} ms")
        finally:
            os.unlink(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
