"""Shared helpers of the launcher tests (no tests here; imported by tests/test_launch_*.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

WORKER = r'''
import os, signal, subprocess, sys, time
rank = int(os.environ["RANK"])
mode, state = sys.argv[1], sys.argv[2]
with open(os.path.join(state, f"pid.{rank}"), "w") as fh:
    fh.write(str(os.getpid()))

def comm():
    from hcomm_cffi.binding import get_binding
    from hcomm_cffi.bootstrap import discover
    b = get_binding()
    b.acl_init()
    b.set_device(0)                 # before the root info, as CANN requires
    spec = discover(b)
    return b.comm_init_root_info(spec.size, spec.root_info, spec.rank)

def ready():
    with open(os.path.join(state, f"ready.{rank}"), "w"):
        pass
    print("ready", flush=True)

if mode in ("fail", "sigkill"):
    c = comm()
    ready()
    if rank == 1:
        time.sleep(0.3)
        if mode == "fail":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
elif mode == "sleep":
    c = comm() if os.environ.get("WITH_COMM") else None
    if rank == 1 and os.environ.get("IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready()
    time.sleep(60)
elif mode == "missing":
    from hcomm_cffi.binding import get_binding
    from hcomm_cffi.bootstrap import RendezvousTimeout, discover
    n = int(os.environ["WORLD_SIZE"])
    if rank == n - 1:
        time.sleep(60)      # never calls init; stopped by the launcher when the others fail
    try:
        get_binding().set_device(0)     # before the root info, as CANN requires
        discover(get_binding())
        print("no error", flush=True)
    except RendezvousTimeout as exc:
        print(f"caught: {exc}", flush=True)
    open(os.path.join(state, f"done.{rank}"), "w").close()
    end = time.monotonic() + 10   # nobody exits before every rank has printed
    while time.monotonic() < end and len([f for f in os.listdir(state) if f.startswith("done.")]) < n - 1:
        time.sleep(0.02)
    sys.exit(9)
elif mode == "output":
    print(f"env RANK={os.environ['RANK']} WORLD_SIZE={os.environ['WORLD_SIZE']} "
          f"LOCAL_RANK={os.environ['LOCAL_RANK']} LOCAL_WORLD_SIZE={os.environ['LOCAL_WORLD_SIZE']} "
          f"HCOMM_RUN_ID={os.environ['HCOMM_RUN_ID']} HCOMM_JOB_ID={os.environ['HCOMM_JOB_ID']} "
          f"HCOMM_BACKEND={os.environ['HCOMM_BACKEND']} "
          f"JOB_DIR_EXISTS={os.path.isdir(os.environ['HCOMM_RUN_JOB_DIR'])}")
    with open(os.path.join(state, f"jobdir.{rank}"), "w") as fh:
        fh.write(os.environ["HCOMM_RUN_JOB_DIR"])
    body = str(rank) * 997
    for i in range(300):
        sys.stdout.write(f"line {i} {body}\n")
        if i % 50 == 0:
            sys.stderr.write(f"err {i} of rank {rank}\n")
    sys.stdout.flush()
    sys.stdout.write("no newline at the end")
elif mode == "grandchild":
    if rank == 0:
        child = subprocess.Popen(["sleep", "60"])
        with open(os.path.join(state, "grandchild"), "w") as fh:
            fh.write(str(child.pid))
    sys.exit(0)
'''


def write_worker(directory: str) -> str:
    path = os.path.join(directory, "worker.py")
    with open(path, "w") as fh:
        fh.write(WORKER)
    return path


def launcher(n: int, *command: str, options: List[str] = (), module: str = "hcomm_cffi.run") -> List[str]:
    """The command line of a launcher running ``command`` on ``n`` ranks."""
    if module == "hcomm_cffi":  # the `hcomm` console entry point, through `python -m hcomm_cffi`
        return [sys.executable, "-m", "hcomm_cffi", "run", "-n", str(n), *options, "--", *command]
    return [sys.executable, "-m", module, "-n", str(n), *options, "--", *command]


# launcher variables of the environment pytest itself runs in must not leak into the jobs under test
_INHERITED_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "HCOMM_JOB_ID", "HCOMM_RENDEZVOUS", "HCOMM_RENDEZVOUS_DIR", "HCOMM_MASTER_ADDR",
                          "HCOMM_MASTER_PORT", "RANK_TABLE_FILE", "RANK_ID")


def start(cmd: List[str], env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    """Start ``cmd`` in its own session with this environment (minus launcher variables) plus ``env``."""
    base = {k: v for k, v in os.environ.items()
            if k not in _INHERITED_LAUNCH_VARS and not k.startswith(("HCOMM_RUN_", "TORCHELASTIC_", "OMPI_", "PMI"))}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**base, **(env or {})}, start_new_session=True)


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def pids(state: str) -> List[int]:
    out = []
    for name in os.listdir(state):
        if name.startswith("pid.") or name == "grandchild":
            with open(os.path.join(state, name)) as fh:
                out.append(int(fh.read()))
    return out


def wait_gone(pid_list: List[int], within: float = 3.0) -> List[int]:
    """The pids still alive after ``within`` seconds (ideally none)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        left = [p for p in pid_list if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pid_list if alive(p)]


def wait_files(state: str, prefix: str, count: int, within: float = 30.0, every: float = 0.05) -> None:
    """Until ``state`` holds ``count`` files named ``prefix...``, looking ``every`` seconds; AssertionError after
    ``within``."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if len([f for f in os.listdir(state) if f.startswith(prefix)]) >= count:
            return
        time.sleep(every)
    raise AssertionError(f"only {os.listdir(state)} in {state} after {within} s; expected {count} x {prefix}*")


def private_shm_dir() -> str:
    """A private directory for the emulator's segments (HCOMM_SIM_SHM_DIR), so leak checks see only this job."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    return tempfile.mkdtemp(prefix="hcommtest-", dir=base)


def run_job(cmd: List[str], env: Dict[str, str]) -> tuple:
    """Run a launcher command on the emulator; (exit code, stdout, stderr)."""
    proc = start(cmd, {"HCOMM_BACKEND": "sim", **env})
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def check_example_output(out: str, n: int, launcher_name: str) -> None:
    """The allreduce example printed the right sum on every rank and rank 0's PASS summary."""
    import re

    expected = n * (n + 1) / 2
    for r in range(n):
        assert re.search(rf"rank {r}/{n}: allreduce\(sum of rank\+1\) = {expected:.1f} on every element .* OK", out), out
    assert f"allreduce: {n}/{n} ranks OK (PASS); backend sim, launcher {launcher_name}" in out
