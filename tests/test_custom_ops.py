"""Custom communication operators built and run the vendor's way on the emulated install.

The package is the project's own (tests/clients/custom_ops_demo: op_host/ the host library, op_kernel_aicpu/
the AICPU kernels and their JSON, inc/ its header, testcase/ a program and its Makefile; an allgather and a
send/recv), laid out as the vendor's samples are.  ``hcomm sim build-ops`` compiles and installs it into
opp/vendors/<vendor>; the testcase runs with one thread per device (2, 4, 8) and under mpirun (one process per
device) and checks every byte.  A broken variant (the kernel's last HcommThreadNotifyRecordOnThread deleted)
gets the checker's report naming the notify and an error from aclrtSynchronizeStream within seconds, not a
hang.  Each operator's Python twin (examples/custom_ops) is planned by ``hcomm plan``; the C operator's
acquisitions (the emulator's ledger) match the plan and both produce the same bytes.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from cann_install import child_env, install  # noqa: F401  (install is a fixture)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "tests" / "clients" / "custom_ops_demo"
FINAL_RECORD = "CHECK(HcommThreadNotifyRecordOnThread(th, r->hostThread, 0));"


def _hcomm(*args: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hcomm_cffi", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _build(install: Any, source: Path, vendor: str, target: Path) -> Path:
    """build-ops the package at ``source`` as ``vendor``, then make its testcase as ``target``."""
    env = child_env(install, str(REPO))
    done = _hcomm("sim", "build-ops", "--vendor", vendor, "--ops", "demo", "--custom-ops-path", str(source),
                  "--install-path", install.root, env=env)
    assert done.returncode == 0, done.stderr
    made = subprocess.run(["make", "-s", f"VENDOR={vendor}", f"TARGET={target}"], cwd=source / "testcase",
                          capture_output=True, text=True, env=env, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    return target


@pytest.fixture(scope="module")
def programs(install: Any, tmp_path_factory: Any) -> Dict[str, Path]:
    """The demo testcase and the broken variant's, each built against its own installed package."""
    if shutil.which("g++") is None or shutil.which("make") is None:
        pytest.skip("g++ and make are needed to build the operator package's testcase")
    work = tmp_path_factory.mktemp("custom_ops")
    good = _build(install, PACKAGE, "cust", work / "demo_allgather")
    broken_src = work / "broken_package"
    shutil.copytree(PACKAGE, broken_src)
    kernel = broken_src / "op_kernel_aicpu" / "allgather_kernel.cc"
    text = kernel.read_text()
    assert text.count(FINAL_RECORD) == 1
    kernel.write_text(text.replace(FINAL_RECORD, "/* the host stream's go-on: missing */"))
    return {"good": good, "broken": _build(install, broken_src, "broken", work / "demo_broken"), "work": work}


def _run(argv: List[str], env: Dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


def test_installed_in_the_vendor_layout(install: Any, programs: Dict[str, Path]) -> None:
    root = Path(install.root) / "opp" / "vendors" / "cust"
    for rel in ("include/hccl_custom_demo.h", "lib64/libhccl_custom_demo.so", "aicpu/config/libhccl_demo_kernel.json",
                "aicpu/kernel/aicpu_hccl_custom_demo.tar.gz",
                "aicpu/kernel/aicpu_kernels_device/libhccl_demo_kernel.so"):
        assert (root / rel).is_file(), rel


@pytest.mark.parametrize("devices", [2, 4, 8])
@pytest.mark.parametrize("mode", ["allgather", "p2p"])
def test_threads_as_ranks(install: Any, programs: Dict[str, Path], devices: int, mode: str) -> None:
    env = child_env(install, str(REPO), HCOMM_SIM_DEVICE_COUNT=str(devices))
    done = _run([str(programs["good"]), "300", mode], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(done.stdout.split("\n")[:-1]) == sorted(f"rank {r}: ok" for r in range(devices))


def test_under_mpirun(install: Any, programs: Dict[str, Path]) -> None:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found (bash scripts/setup-test-env.sh installs Open MPI)")
    trace_dir = programs["work"] / "trace"
    env = child_env(install, str(REPO), HCOMM_RENDEZVOUS_DIR=str(programs["work"]), HCOMM_RENDEZVOUS="file",
                    HCOMM_TRACE=str(trace_dir))
    extra = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    done = _run([mpirun, *extra, "--oversubscribe", "-n", "4", str(programs["good"]), "300", "allgather"], env,
                timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(line for line in done.stdout.splitlines() if line.startswith("rank")) == \
        sorted(f"rank {r}: ok" for r in range(4))
    # HCOMM_TRACE: every rank's file has the kernel on its stream and the kernel's tasks on its thread
    traces = sorted(trace_dir.glob("*.rank*.trace.json"))
    assert len(traces) == 4, traces
    for path in traces:
        slices = {e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"}
        assert {"aicpukernel", "twait", "trecord", "copy", "read", "record", "wait"} <= slices, (path, slices)


def test_under_hcomm_run(install: Any, programs: Dict[str, Path]) -> None:
    done = _run([sys.executable, "-m", "hcomm_cffi", "run", "-n", "4", "--", str(programs["good"]), "300", "p2p"],
                child_env(install, str(REPO)), timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(line.split("] ", 1)[-1] for line in done.stdout.splitlines() if "rank" in line) == \
        sorted(f"rank {r}: ok" for r in range(4))


def test_missing_notify_record_is_named_not_a_hang(install: Any, programs: Dict[str, Path]) -> None:
    env = child_env(install, str(REPO), HCOMM_SIM_DEVICE_COUNT="2", HCOMM_SIM_CHECK="warn")  # findings on stderr
    done = _run([str(programs["broken"]), "100"], env, timeout=60)    # the kernel's waits time out after 30 s
    assert done.returncode == 1, done.stdout + done.stderr
    for rank in (0, 1):
        line = next(x for x in done.stdout.splitlines() if x.startswith(f"rank {rank}: "))
        assert "aclrtSynchronizeStream(stream) returned" in line, line
        assert "waits on thread notify 0, which nothing can record any more" in line, line
        assert "a missing HcommThreadNotifyRecordOnThread" in line, line
    assert "checker: rank 0" in done.stderr and "nothing can record any more" in done.stderr


# ---------------------------------------------------------------- parity with the same operators in Python
EXAMPLES = REPO / "examples" / "custom_ops"
#: testcase mode -> (the Python twin, its plan's --op arguments)
TWINS = {"allgather": (f"{EXAMPLES / 'demo_ops.py'}:demo_allgather", ["--op", "allgather"]),
         "p2p": (f"{EXAMPLES / 'demo_ops.py'}:demo_sendrecv", [])}


def python_operator_body(rank: int, n: int, root_info: bytes, mode: str, count: int) -> List[bytes]:
    """The testcase's two rounds with the Python twin of operator ``mode``: each round's output bytes."""
    import numpy as np

    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    try:
        out = []
        for round_ in range(2):
            x = (round_ * 1000000 + rank * 1000 + np.arange(count)).astype(np.int32)
            if mode == "allgather":
                out.append(w.allgather(x, algorithm=TWINS[mode][0]).tobytes())
            else:
                out.append(w.run_algorithm(TWINS[mode][0], x, out=np.zeros(count, np.int32)).tobytes())
        return out
    finally:
        hcomm.finalize()


@pytest.mark.parametrize("mode", sorted(TWINS))
def test_c_operator_matches_its_python_twin(install: Any, programs: Dict[str, Path], tmp_path: Path,
                                            mode: str) -> None:
    """The C operator acquires what `hcomm plan` derives for its Python twin (plus the kernel launch's handoff),
    and both produce the same bytes."""
    from hcomm_cffi.sim import ledger
    from multiproc import run_ranks

    n, count = 4, 300
    (tmp_path / "c").mkdir()
    env = child_env(install, str(REPO), HCOMM_SIM_DEVICE_COUNT=str(n), HCOMM_SIM_LEDGER=str(tmp_path / "ledger"),
                    DEMO_OUTPUT_DIR=str(tmp_path / "c"))
    done = _run([str(programs["good"]), str(count), mode], env)
    assert done.returncode == 0, done.stdout + done.stderr
    (dump,) = (tmp_path / "ledger").glob("ledger-*.json")
    records = ledger.load(str(dump))

    algo, op = TWINS[mode]
    planned = _hcomm("plan", "--algo", algo, *op, "--ranks", str(n), "--size", str(count * 4), "--dtype", "int32",
                     "--json", env=child_env(install, str(REPO)))
    assert planned.returncode == 0, planned.stderr
    for plan in json.loads(planned.stdout)["derived"]["per_rank"]:
        mine = [a for a in records if a.rank == plan["rank"]]
        channels = sorted((peer, a.notifies) for a in mine if a.kind == "channel" for peer in a.peers)
        assert channels == sorted((c["peer"], c["notifies"]) for c in plan["channels"])
        kernel_threads = [(a.count, a.notifies) for a in mine if a.kind == "thread" and a.engine == "AICPU_TS"]
        # the twin's one thread runs on the AICPU; a launch adds one notify to the kernel's thread (the host's go)
        # and the stream's thread with one notify (the kernel's done)
        assert plan["threads"] == 1 and kernel_threads == [(1, plan["thread_notifies"][0] + 1)]
        assert [(a.count, a.notifies) for a in mine if a.kind == "thread" and a.engine == "CPU_TS"] == [(1, 1)]

    python = run_ranks(n, python_operator_body, mode, count, timeout=120)
    receivers = range(n) if mode == "allgather" else range(1, n, 2)
    for rank in receivers:
        for round_ in range(2):
            assert (tmp_path / "c" / f"rank{rank}.round{round_}.bin").read_bytes() == python[rank][round_]


# ---------------------------------------------------------------- build-ops errors and the install's securec
def test_build_ops_errors_name_the_file_and_the_compiler_message(install: Any, tmp_path: Path) -> None:
    from hcomm_cffi.cannlib.build import BuildError
    from hcomm_cffi.cannlib.build_ops import build_ops

    with pytest.raises(BuildError, match="is not an emulated CANN install"):
        build_ops("cust", "demo", str(PACKAGE), str(tmp_path))
    with pytest.raises(BuildError, match=r"--vendor 'a/b': expected letters, digits and '_'"):
        build_ops("a/b", "demo", str(PACKAGE), install.root)
    with pytest.raises(BuildError, match="op_host/op_host is missing; an operator package has op_host/"):
        build_ops("cust", "demo", str(PACKAGE / "op_host"), install.root)
    broken = tmp_path / "pkg"
    shutil.copytree(PACKAGE, broken)
    source = broken / "op_host" / "p2p.cc"
    source.write_text(source.read_text().replace("return P2P(recvBuf,", "return P2P(recvBuf undeclared_name,"))
    with pytest.raises(BuildError) as failed:
        build_ops("typo", "demo", str(broken), install.root)
    message = str(failed.value)
    assert f"compiling {source} failed" in message and "p2p.cc:" in message and "error:" in message, message
    assert not (Path(install.root) / "opp" / "vendors" / "typo").exists()      # nothing half-installed


SECUREC_C = r"""
#include <stdio.h>
#include <string.h>
#include <securec.h>
#define EXPECT(cond) do { if (!(cond)) { printf("failed: %s (line %d)\n", #cond, __LINE__); return 1; } } while (0)
int main(void)
{
    char buf[8];
    EXPECT(sprintf_s(buf, sizeof buf, "%s", "abc") == 3 && strcmp(buf, "abc") == 0);
    EXPECT(sprintf_s(buf, sizeof buf, "%s", "too long!") == -1 && buf[0] == '\0');
    EXPECT(snprintf_s(buf, sizeof buf, 3, "%s", "abcdef") == -1 && strcmp(buf, "abc") == 0);
    EXPECT(memcpy_s(buf, sizeof buf, "0123456789", 10) == ERANGE_AND_RESET && buf[0] == 0);
    EXPECT(memcpy_s(buf, sizeof buf, "0123", 4) == EOK && memcmp(buf, "0123", 4) == 0);
    EXPECT(memcpy_s(buf, sizeof buf, NULL, 4) == EINVAL_AND_RESET);
    EXPECT(memcpy_s(buf + 1, 7, buf, 4) == EOVERLAP_AND_RESET);
    EXPECT(memset_s(buf, sizeof buf, 'x', 9) == ERANGE_AND_RESET && buf[7] == 'x');
    EXPECT(strcpy_s(buf, sizeof buf, "1234567") == EOK && strcmp(buf, "1234567") == 0);
    EXPECT(strcpy_s(buf, sizeof buf, "12345678") == ERANGE_AND_RESET && buf[0] == '\0');
    EXPECT(strncpy_s(buf, sizeof buf, "abcdef", 2) == EOK && strcmp(buf, "ab") == 0);
    EXPECT(strcat_s(buf, sizeof buf, "cde") == EOK && strcmp(buf, "abcde") == 0);
    EXPECT(strcat_s(buf, sizeof buf, "xyz") == ERANGE_AND_RESET && buf[0] == '\0');
    EXPECT(memcpy_s(NULL, 4, "a", 1) == EINVAL && memcpy_s(buf, 0, "a", 1) == ERANGE);
    printf("ok\n");
    return 0;
}
"""


def test_securec_of_the_install(install: Any, tmp_path: Path) -> None:
    (tmp_path / "t.c").write_text(SECUREC_C)
    subprocess.run(["cc", "-o", str(tmp_path / "t"), str(tmp_path / "t.c"), f"-I{install.include_dir}",
                    f"-L{install.lib_dir}", "-lc_sec", f"-Wl,-rpath,{install.lib_dir}"], check=True, timeout=120)
    done = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stdout


def test_asc_launches_become_emulator_calls() -> None:
    from hcomm_cffi.cannlib.build_ops import rewrite_asc_launches

    text = "    Kernel<<<blockDim, nullptr, stream>>>(&param, sizeof(OpParam));  // x<<<1>>> stays"
    assert rewrite_asc_launches(text) == ('    HcommSimAscLaunchAicpu((void *)&Kernel, "Kernel", blockDim, stream, '
                                          '&param, sizeof(OpParam));  // x<<<1>>> stays')
