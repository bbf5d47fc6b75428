"""The job secret is access control (issue 25 item 6), and a peer that left is named at once (item 9).

* the TCP store serves only this user's local processes, or clients that prove HCOMM_JOB_SECRET: another
  Unix user (uid 65534, by ``setuid`` in a forked child; needs root) can neither read the root info nor
  overwrite it;
* a same-user process outside the job finds no segment of a connected communicator to attach to, and one
  that joins with a copy of the root info but without the job's secret never reaches the job's memory;
* a peer that finalised, or failed and carries on, fails a rank waiting on it within seconds, naming it;
* a rank killed during the bootstrap rendezvous is named at once, long before HCCL_CONNECT_TIMEOUT.
"""
from __future__ import annotations

import encodings.idna  # noqa: F401  (socket needs it for host names; a child as another uid may not read it later)
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List

import numpy as np
import pytest

from hcomm_cffi.bootstrap import BootstrapError, FileStore, TcpStore, TcpStoreServer, exchange_root_info
from hcomm_cffi.bootstrap.tcp_store import socket_owner
from multiproc import run_ranks

pytestmark = pytest.mark.slow

NOBODY = 65534
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="acting as a second Unix user needs root (os.setuid)")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_nobody(action) -> str:
    """Run ``action()`` in a forked child that became uid/gid 65534; returns what it printed (or its error)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                text = f"ok {action()!r}"
            except Exception as exc:  # reported to the parent
                text = f"{type(exc).__name__}: {exc}"
            os.write(w, text.encode()[:4000])
        finally:
            os._exit(0)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


@pytest.fixture
def served():
    port = _free_port()
    server = TcpStoreServer("127.0.0.1", port, secret="s3cret-of-the-job")
    server.serve_in_background()
    server.data["hcomm/job/0/e0/root_info"] = b"the root info with the emulator's access secret"
    yield port, server
    server.shutdown()
    server.server_close()


def test_socket_owner_names_this_users_connection(served):
    import socket

    port, _ = served
    with socket.create_connection(("127.0.0.1", port)) as s:
        assert socket_owner(s.getsockname(), s.getpeername()) == os.getuid()


def test_same_user_client_is_served(served):
    port, _ = served
    store = TcpStore("127.0.0.1", port, secret="")
    try:
        assert store.get("hcomm/job/0/e0/root_info").startswith(b"the root info")
    finally:
        store.close()


@needs_root
def test_another_user_can_neither_read_nor_overwrite_the_root_info(served):
    port, server = served
    got = _as_nobody(lambda: TcpStore("127.0.0.1", port, secret="").get("hcomm/job/0/e0/root_info"))
    assert got.startswith("BootstrapError") and f"refused a process of uid {NOBODY}" in got, got
    assert "did not prove HCOMM_JOB_SECRET" in got
    wrote = _as_nobody(lambda: TcpStore("127.0.0.1", port, secret="a guess").set("hcomm/job/0/e0/root_info", b"x"))
    assert wrote.startswith("BootstrapError") and "HCOMM_JOB_SECRET proof is wrong" in wrote, wrote
    assert server.data["hcomm/job/0/e0/root_info"].startswith(b"the root info")   # nothing landed
    member = _as_nobody(lambda: TcpStore("127.0.0.1", port, secret="s3cret-of-the-job").get("hcomm/job/0/e0/root_info"))
    assert member.startswith("ok b") and "the root info" in member, member       # a member on another account proves the secret


@needs_root
def test_another_user_cannot_use_the_store_without_any_secret():
    port = _free_port()
    server = TcpStoreServer("127.0.0.1", port, secret="")
    server.serve_in_background()
    try:
        got = _as_nobody(lambda: TcpStore("127.0.0.1", port, secret="x").get("k"))
        assert "only this user's processes on this host are served when HCOMM_JOB_SECRET is unset" in got, got
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------ a same-user rogue process
ROGUE = r'''
import os, sys
from hcomm_cffi.sim.shm import SHM_DIR
root = open(sys.argv[1], "rb").read()
comm_id = root[16:36].decode()
names = [n for n in os.listdir(SHM_DIR) if comm_id in n]
print("visible", len(names), flush=True)
from hcomm_cffi.binding import get_binding
b = get_binding()
b.set_device(1)
try:
    b.comm_init_root_info(2, root, 1)      # as rank 1, without the job's HCOMM_JOB_SECRET
    print("JOINED", flush=True)
except Exception as exc:
    print("refused", type(exc).__name__, str(exc)[:200], flush=True)
'''


def _job_under_attack(rank: int, n: int, root: bytes, state: str) -> List[float]:
    import hcomm_cffi as hcomm
    os.environ["HCOMM_JOB_SECRET"] = "the-jobs-own-secret"
    if rank == 0:
        with open(os.path.join(state, "root"), "wb") as fh:
            fh.write(root)
    w = hcomm.init(rank=rank, world_size=n, root_info=root)
    try:
        open(os.path.join(state, f"ready.{rank}"), "w").close()
        sums = []
        end = time.monotonic() + 60
        while time.monotonic() < end:
            x = np.full(1024, float(rank + 1), np.float32)
            w.allreduce(x)
            sums.append(float(x.min()))
            sums.append(float(x.max()))
            stop = np.array([float(os.path.exists(os.path.join(state, "rogue-done")))])
            w.allreduce(stop)                      # both ranks stop after the same call
            if stop[0]:
                break
        return sorted(set(sums))
    finally:
        hcomm.finalize()


def test_a_same_user_rogue_finds_nothing_to_attach_and_cannot_join(tmp_path):
    state = str(tmp_path)
    rogue_file = tmp_path / "rogue.py"
    rogue_file.write_text(ROGUE)
    out: Dict[str, Any] = {}

    def rogue() -> None:
        end = time.monotonic() + 60
        while len([f for f in os.listdir(state) if f.startswith("ready.")]) < 2 and time.monotonic() < end:
            time.sleep(0.05)
        env = {k: v for k, v in os.environ.items() if k != "HCOMM_JOB_SECRET"}
        env.update({"PYTHONPATH": REPO, "HCCL_CONNECT_TIMEOUT": "3"})
        proc = subprocess.run([sys.executable, str(rogue_file), os.path.join(state, "root")], env=env,
                              capture_output=True, text=True, timeout=60)
        out["text"] = proc.stdout + proc.stderr
        open(os.path.join(state, "rogue-done"), "w").close()

    t = threading.Thread(target=rogue)
    t.start()
    sums = run_ranks(2, _job_under_attack, state, timeout=120)
    t.join(60)
    assert "visible 0" in out["text"], out["text"]          # no name left to attach to once connected
    assert "JOINED" not in out["text"] and "refused" in out["text"], out["text"]
    assert sums == [[3.0], [3.0]]                             # every allreduce of the job stayed right


# ------------------------------------------------------------------ item 9: peers that left
def _peer_leaves(rank: int, n: int, root: bytes, how: str, answered: str) -> Any:
    import hcomm_cffi as hcomm
    from hcomm_cffi.api.errors import CommError
    w = hcomm.init(rank=rank, world_size=n, root_info=root, exec_timeout=2 if rank == 1 else 600)
    if rank == 1:
        if how == "finalised":
            hcomm.finalize()
        else:
            try:                                   # a receive nobody sends: fails after its 2 s, caught
                w.recv(np.empty(4), src=0)
            except CommError:
                pass
        until = time.monotonic() + 12              # alive, but out of the communicator, until rank 0 has its answer
        while not os.path.exists(answered) and time.monotonic() < until:
            time.sleep(0.05)
        if how != "finalised":
            hcomm.finalize()
        return None
    time.sleep(3.5 if how == "failed" else 1.0)    # rank 1 has failed / finalised by now
    start = time.monotonic()
    try:
        w.recv(np.empty(4), src=1)
        return "no error"
    except CommError as exc:
        return time.monotonic() - start, str(exc)
    finally:
        open(answered, "w").close()
        hcomm.finalize()


@pytest.mark.parametrize("how", ["finalised", "failed"])
def test_a_peer_that_left_the_communicator_is_named_at_once(how: str, tmp_path: Any) -> None:
    elapsed, text = run_ranks(2, _peer_leaves, how, str(tmp_path / "answered"), timeout=120)[0]
    assert elapsed < 8, (elapsed, text)           # HCCL_EXEC_TIMEOUT of rank 0 is 600 s
    want = "destroyed its communicator" if how == "finalised" else "failed an operation of this communicator"
    assert "peer rank 1" in text and want in text, text


def test_a_rank_killed_during_the_rendezvous_is_named_before_the_connect_timeout(tmp_path) -> None:
    """Rank 1 claims its slot in a file rendezvous and is SIGKILLed; rank 0 (120 s timeout) names it at once."""
    child = r'''
import os, signal, sys
from hcomm_cffi.bootstrap import FileStore, exchange_root_info
store = FileStore(sys.argv[1])
store.claim("ns/e0/claim/1", ('{"host": "h", "pid": %d, "token": "t", "start": 0, "arrived": %f}'
                              % (os.getpid(), __import__("time").time())).encode())
print("claimed", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
'''
    started = time.time()
    proc = subprocess.run([sys.executable, "-c", child, str(tmp_path)], env={**os.environ, "PYTHONPATH": REPO},
                          capture_output=True, text=True, timeout=60)
    assert "claimed" in proc.stdout and proc.returncode == -signal.SIGKILL
    t0 = time.monotonic()
    with pytest.raises(BootstrapError, match=r"rank 1 \(pid \d+ on h\) exited during the rendezvous"):
        exchange_root_info(FileStore(str(tmp_path)), 0, 2, lambda: b"\0" * 4108, 120.0, "ns", started=started - 5)
    assert time.monotonic() - t0 < 5


# ------------------------------------------------------------------ item 7: squatted per-user directories
@needs_root
@pytest.mark.parametrize("via", ["TMPDIR", "HCOMM_RENDEZVOUS_DIR"])
def test_another_user_squatting_hcomm_uid_cannot_stop_hcomm_run(via: str, shm: str) -> None:
    from test_launch_helpers import launcher, start

    parent = tempfile.mkdtemp(prefix="hcomm-squat-")
    os.chmod(parent, 0o1777)                           # a shared /tmp-like directory
    try:
        squatted = os.path.join(parent, f"hcomm-{os.getuid()}")
        got = _as_nobody(lambda: os.mkdir(squatted, 0o755))     # the name every earlier release used
        assert got.startswith("ok"), got
        script = ("import hcomm_cffi as h, numpy as np; w = h.init(); x = np.ones(4); w.allreduce(x); "
                  "print('sum', x[0], __import__('os').environ['HCOMM_RUN_JOB_DIR']); h.finalize()")
        proc = start(launcher(2, sys.executable, "-c", script),
                     {via: parent, "HCOMM_SIM_SHM_DIR": shm, "HCOMM_BACKEND": "sim"})
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.count("sum 2.0") == 2, out
        job_dir = out.split("sum 2.0 ")[1].split()[0]
        assert os.path.dirname(job_dir) == parent and os.path.basename(job_dir).startswith(f"hcomm-{os.getuid()}-run-")
        assert not os.path.exists(job_dir)             # removed at the end
        assert os.stat(squatted).st_uid == NOBODY       # and the squatter's directory was left alone
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_a_rank_killed_while_the_communicator_connects_is_named_at_once() -> None:
    """Rank 1 creates its segments and is SIGKILLed before it connects; rank 0 (120 s connect timeout) names it."""
    import uuid

    from hcomm_cffi.sim.comm import SimComm
    from hcomm_cffi.sim.config import read_config
    from hcomm_cffi.sim.errors import SimError

    comm_id = uuid.uuid4().hex[:20]
    child = ("import sys, time; from hcomm_cffi.sim.comm import SimComm; from hcomm_cffi.sim.config import read_config;"
             f"c = SimComm(1, {comm_id!r}, 'victim', 1, 2, read_config(), b's'); print('ready', flush=True); "
             "time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": REPO})
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.environ["HCCL_CONNECT_TIMEOUT"], old = "120", os.environ.get("HCCL_CONNECT_TIMEOUT")
        try:
            mine = SimComm(2, comm_id, "victim", 0, 2, read_config(), b"s")
        finally:
            os.environ["HCCL_CONNECT_TIMEOUT"] = old or "30"
        threading.Timer(1.0, proc.kill).start()
        t0 = time.monotonic()
        try:
            with pytest.raises(SimError, match=r"rank\(s\) \[1\] died while connecting"):
                mine.connect()
        finally:
            mine.destroy()
        assert time.monotonic() - t0 < 10
    finally:
        proc.kill()
        proc.wait(10)


# ------------------------------------------------------------------ issue 46 item 11: nothing read before admission
def _flood(port: int, count: int, payload: bytes, ready_w: int, hold: float) -> None:
    """As another user: open ``count`` connections sending ``payload`` each, hold them ``hold`` s, then close."""
    import socket
    socks = []
    for _ in range(count):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(payload)
            socks.append(s)
        except OSError:
            pass
    os.write(ready_w, b"ok")
    time.sleep(hold)
    for s in socks:
        s.close()


@needs_root
def test_connections_of_another_user_are_bounded_and_read_little(served, capfd):
    """200 connections of another uid announcing 4 MiB messages: no thread per connection beyond the admission
    bound, no 4 MiB read, no traceback on stderr; the job's own client is served meanwhile."""
    import struct

    from hcomm_cffi.bootstrap.tcp_store import MAX_PENDING
    port, server = served
    before = threading.active_count()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            _flood(port, 200, struct.pack("!I", 4 << 20) + b"[" * 60000, w, 3.0)
        finally:
            os._exit(0)
    os.close(w)
    try:
        assert os.read(r, 2) == b"ok"
        time.sleep(0.5)                           # every connection reached the server
        assert threading.active_count() - before <= MAX_PENDING + 2, threading.active_count() - before
        store = TcpStore("127.0.0.1", port, secret="s3cret-of-the-job")
        try:
            assert store.get("hcomm/job/0/e0/root_info").startswith(b"the root info")
        finally:
            store.close()
    finally:
        os.waitpid(pid, 0)
        os.close(r)
    # an answer nested deeper than the JSON parser takes, from another user: dropped without a traceback
    got = _as_nobody(lambda: _nested_answer(port))
    assert got.startswith("ok"), got
    time.sleep(0.3)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err, err


def _nested_answer(port: int) -> str:
    import socket
    import struct
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.recv(4096)                              # the greeting
        body = b"[" * 900
        s.sendall(struct.pack("!I", len(body)) + body)
        return s.recv(4096).decode(errors="replace")
