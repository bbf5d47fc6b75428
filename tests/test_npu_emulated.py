"""The emulated npu device: torch_npu-shaped scripts and the seed's programs, unchanged, on the emulator.

Every program runs in its own interpreter, as a user's would: ``HCOMM_EMULATE_NPU=1`` and torch's device-backend
autoload (the ``torch.backends`` entry point this package declares; here a dist-info directory on PYTHONPATH
declares the same one, as an installed wheel would) make the device at ``import torch``.  The extension is built
at most once per session, into its per-user cache.

The commands of docs/guide/npu-on-a-laptop.md (and the torchrun line of README.md) are these tests: the seed's
programs under ``hcomm run``, a torch_npu-shaped DDP script under torchrun, and a program in the shape of Ascend's
PyTorch allreduce sample.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import pytest

pytest.importorskip("torch", reason="torch is not installed (pip install -e .[test])")

from test_launch_helpers import launcher, private_shm_dir, start  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = Path(__file__).resolve().parent / "clients"
SEED = ROOT / "examples" / "seed"


def _entry_point() -> str:
    """pyproject's torch.backends entry point line (the test's dist-info must declare the same)."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'\[project\.entry-points\."torch\.backends"\]\s*\n(\w+) = "([\w.:]+)"', text)
    assert found, "pyproject.toml declares no torch.backends entry point"
    return f"{found.group(1)} = {found.group(2)}"


@pytest.fixture(scope="session")
def npu_paths(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, str]:
    """PYTHONPATH with the entry point, a build cache (the extension built here once), for every test below."""
    base = tmp_path_factory.mktemp("npu")
    info = base / "site" / "hcomm_emulated_npu_test-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hcomm-emulated-npu-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[torch.backends]\n{_entry_point()}\n")
    # the extension's own cache (a private directory of this user, kept between sessions like pip's): built at most
    # once per session, usually not at all
    paths = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(base / "site")]), "OMP_NUM_THREADS": "1"}
    done = _python(["-c", "import torch; torch.npu.init(); torch.zeros(1, device='npu')"],
                   {**paths, "HCOMM_EMULATE_NPU": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr
    return paths


def _python(args: List[str], env: Dict[str, str], timeout: float = 120) -> "subprocess.CompletedProcess[str]":
    keep = {k: v for k, v in os.environ.items() if k not in ("HCOMM_EMULATE_NPU", "PYTHONPATH")}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**keep, **env}, cwd=str(ROOT))


def _run(code: str, npu_paths: Dict[str, str], switch: Optional[str] = "1",
         extra: Optional[Dict[str, str]] = None) -> str:
    env = {**npu_paths, **(extra or {})}
    if switch is not None:
        env["HCOMM_EMULATE_NPU"] = switch
    done = _python(["-c", code], env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: torch's own gloo can abort a rank at teardown after the script's last line ran (a worker thread still joinable
#: at exit, pytorch/pytorch#190489): seen in this reference run on the 2-core VM, twice in a row once
GLOO_TEARDOWN_ABORT = "terminate called without an active exception"
GLOO_REFERENCE_RUNS = 3          # a gloo reference run is made at most this often while it ends in that abort


def _gloo_reference(run: Callable[[], Tuple[int, str]]) -> Tuple[int, str]:
    """``run()`` -> (exit code, output), run again while it ended in gloo's teardown abort (torch's crash, not a
    result), GLOO_REFERENCE_RUNS times at most."""
    for _ in range(GLOO_REFERENCE_RUNS):
        code, out = run()
        if code == 0 or GLOO_TEARDOWN_ABORT not in out:
            break
    return code, out


def _torchrun(script: Path, args: List[str], env: Dict[str, str],
              nprocs: int = 2, gloo_reference: bool = False) -> "subprocess.CompletedProcess[str]":
    """``script`` under torchrun on ``nprocs`` ranks, in a private shared-memory directory that must end empty.

    A ``gloo_reference`` run (torch alone on CPU, the bytes this package's run is compared with) is run again once
    when gloo aborted at teardown: that is torch's crash, not a result."""
    shm = private_shm_dir()
    cmd = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nprocs), str(script), *args]
    runs: List["subprocess.CompletedProcess[str]"] = []

    def run() -> Tuple[int, str]:
        runs.append(_python(cmd, {**env, "HCOMM_SIM_SHM_DIR": shm}, timeout=240))
        return runs[-1].returncode, runs[-1].stderr

    _gloo_reference(run) if gloo_reference else run()
    done = runs[-1]
    left = os.listdir(shm)
    os.rmdir(shm) if not left else None
    assert done.returncode == 0 and left == [], done.stdout + done.stderr
    return done


# ------------------------------------------------------------------ the switch
def test_without_the_switch_import_torch_is_as_before(npu_paths: Dict[str, str]) -> None:
    out = _run("import sys, torch, torch.distributed as dist\n"
               "print(torch._C._get_privateuse1_backend_name(), hasattr(torch, 'npu'), 'torch_npu' in sys.modules,\n"
               "      'hcomm_npu_device' in sys.modules, 'hccl' in dist.Backend.backend_list)\n"
               "try:\n    import torch_npu\nexcept ModuleNotFoundError:\n    print('no torch_npu')",
               npu_paths, switch=None)
    assert out.split("\n")[:2] == ["privateuseone False False False False", "no torch_npu"]


def test_a_real_torch_npu_is_never_shadowed(npu_paths: Dict[str, str], tmp_path: Path) -> None:
    """With torch_npu installed (a stand-in package here) the switch changes nothing: its names stay its own."""
    fake = tmp_path / "torch_npu"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = 'the installed torch_npu'\n")
    out = _run("import torch, torch.distributed as dist, torch_npu\n"
               "print(torch_npu.REAL, hasattr(torch, 'npu'), torch._C._get_privateuse1_backend_name(),\n"
               "      'hccl' in dist.Backend.backend_list)",
               npu_paths, extra={"PYTHONPATH": npu_paths["PYTHONPATH"] + os.pathsep + str(tmp_path)})
    assert out.strip() == "the installed torch_npu False privateuseone False"


def test_a_device_that_cannot_be_made_is_an_error_when_asked_for_and_a_warning_under_auto(
        npu_paths: Dict[str, str], tmp_path: Path) -> None:
    """HCOMM_EMULATE_NPU=1 fails at import torch, naming why; auto (hcomm run's) warns and leaves torch as it is."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)            # a build cache others could write: refused before anything is built or loaded
    code = "import sys, torch; print('imported', hasattr(torch, 'npu'), 'torch_npu' in sys.modules)"
    env = {**npu_paths, "HCOMM_NPU_EXT_DIR": str(shared)}
    asked = _python(["-c", code], {**env, "HCOMM_EMULATE_NPU": "1"})
    assert asked.returncode != 0 and f"build cache {shared} belongs to uid" in asked.stderr, asked.stderr
    auto = _python(["-c", code], {**env, "HCOMM_EMULATE_NPU": "auto"})
    assert auto.returncode == 0 and auto.stdout.strip() == "imported False False", auto.stdout + auto.stderr
    assert "HCOMM_EMULATE_NPU=auto: no emulated npu device in this process" in auto.stderr, auto.stderr


def _user_site_with_the_pth(base: Path) -> Dict[str, str]:
    """A user site directory (PYTHONUSERBASE) holding the package's .pth file, as pip puts it into site-packages."""
    site_dir = subprocess.run([sys.executable, "-c", "import site; print(site.getusersitepackages())"],
                              capture_output=True, text=True, env={**os.environ, "PYTHONUSERBASE": str(base)},
                              check=True).stdout.strip()
    os.makedirs(site_dir)
    (Path(site_dir) / "hcomm_cffi_npu.pth").write_text((ROOT / "hcomm_cffi" / "npu" / "hcomm_cffi_npu.pth").read_text())
    return {"PYTHONUSERBASE": str(base)}


IMPORT_TORCH_NPU_FIRST = r"""
import sys
import torch_npu.npu
assert "torch" in sys.modules and torch_npu.__hcomm_emulated__
import torch
assert torch_npu.npu is torch.npu and torch.npu.device_count() == 2
torch_npu.npu.set_device(1)
x = torch.arange(3.0, device="npu") * 2
print("torch_npu first:", x.device, x.cpu().tolist())
"""


def test_import_torch_npu_before_torch_with_the_switch(npu_paths: Dict[str, str], tmp_path: Path) -> None:
    """The .pth's finder: torch_npu first gives the emulated device (also with torch's autoload off); without the
    switch no such name; an installed torch_npu is the one imported; a device that cannot be made says why."""
    env = {**npu_paths, **_user_site_with_the_pth(tmp_path / "user"), "HCOMM_SIM_DEVICE_COUNT": "2"}
    for extra in ({}, {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}):
        out = _run(IMPORT_TORCH_NPU_FIRST, env, extra=extra)
        assert out.strip() == "torch_npu first: npu:1 [0.0, 2.0, 4.0]", (extra, out)
    for switch in (None, "0"):
        out = _run("import importlib.util\nprint(importlib.util.find_spec('torch_npu'))\n"
                   "try:\n    import torch_npu\nexcept ModuleNotFoundError as exc:\n    print(exc)", env, switch=switch)
        assert out.split("\n")[:2] == ["None", "No module named 'torch_npu'"], (switch, out)
    real = tmp_path / "real" / "torch_npu"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = 'the installed torch_npu'\n")
    out = _run("import sys, torch_npu\nprint(torch_npu.REAL, 'torch' in sys.modules)",
               {**env, "PYTHONPATH": env["PYTHONPATH"] + os.pathsep + str(real.parent)})
    assert out.strip() == "the installed torch_npu False"
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    failed = _python(["-c", "import torch_npu"], {**env, "HCOMM_EMULATE_NPU": "auto", "HCOMM_NPU_EXT_DIR": str(shared)})
    assert failed.returncode != 0 and "No module named 'torch_npu': HCOMM_EMULATE_NPU is on but the emulated npu " \
        f"device cannot be made: the emulated npu device's build cache {shared} belongs to uid" in failed.stderr, \
        failed.stderr


def test_private_build_cache_refuses_a_directory_others_can_write(tmp_path: Path) -> None:
    from hcomm_cffi.npu.build import _private_dir

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(RuntimeError, match=r"mode 777; expected a directory owned by uid \d+ that nobody else can"):
        _private_dir(shared)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "mine")
    (tmp_path / "mine").mkdir(mode=0o700)
    with pytest.raises(RuntimeError, match="is not a plain directory"):
        _private_dir(link)
    assert _private_dir(tmp_path / "new" / "dir").stat().st_mode & 0o777 == 0o700


# ------------------------------------------------------------------ the device
DEVICE_PROGRAM = r'''
import io, torch, torch_npu
from hcomm_cffi.binding import get_binding
from hcomm_cffi.api.stream import Stream as AclStream

assert torch_npu.npu is torch.npu and torch.npu.is_available() and torch.npu.device_count() == 3
assert torch._C._get_accelerator() == torch.device("npu")   # the device's hooks are there from import torch on
device_memory = get_binding().lib.state.device
def on_device(t):
    hit = device_memory.find(t.data_ptr(), t.numel() * t.element_size())
    return hit is not None and "aclrtMalloc" in hit[2]

# factories, moves, views, in-place ops: npu storage is the emulator's aclrtMalloc memory
a = torch.arange(12, dtype=torch.float32, device="npu").reshape(3, 4)
b = torch.ones(3, 4).npu()
c = torch.zeros(2, device="npu:2")
assert a.device == torch.device("npu", 0) and c.device == torch.device("npu", 2) and on_device(a) and on_device(c)
v = a[:, 1:3]
v.mul_(10)
assert a.cpu()[0].tolist() == [0, 10, 20, 3] and v.device.type == "npu"
assert (a + b).to("cpu").sum().item() == a.cpu().sum().item() + 12
assert torch.equal(a.T.contiguous().cpu(), a.cpu().T) and a.max().item() == 100
out = torch.empty(0, device="npu")
torch.add(a, b, out=out)              # a CPU kernel grows an out= argument: still npu memory
assert out.shape == (3, 4) and on_device(out) and torch.equal(out.cpu(), a.cpu() + 1)

# autograd and an optimizer on npu:1 (the backward runs on torch's thread for that device)
torch.npu.set_device(1)
assert torch.npu.current_device() == 1 and torch.zeros(1, device="npu").device.index == 1
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
ref.load_state_dict(model.state_dict())
model.npu()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
x = torch.randn(16, 4)
for _ in range(3):
    for m, o, inp in ((model, opt, x.npu()), (ref, ref_opt, x)):
        o.zero_grad()
        m(inp).pow(2).mean().backward()
        o.step()
assert all(p.device == torch.device("npu", 1) and on_device(p) for p in model.parameters())
assert all(torch.equal(p.cpu(), q) for p, q in zip(model.parameters(), ref.parameters()))

# torch.save / torch.load keep the device
buf = io.BytesIO()
torch.save(model.state_dict(), buf)
buf.seek(0)
loaded = torch.load(buf)
assert all(t.device == torch.device("npu", 1) and torch.equal(t.cpu(), p.detach().cpu())
           for t, p in zip(loaded.values(), model.parameters()))

# tensor.data = other across CPU and npu, as torch_npu allows it (nn.Module._apply and FSDP2's move to its mesh's
# device do it): the parameter keeps its identity and autograd follows it to the device
w = torch.nn.Parameter(torch.arange(4.0))
w.data = w.data.to("npu:1")
assert w.device == torch.device("npu", 1) and on_device(w) and w.tolist() == [0.0, 1.0, 2.0, 3.0]
(w * w).sum().backward()
assert w.grad.device == w.device and w.grad.tolist() == [0.0, 2.0, 4.0, 6.0]
w.data = torch.ones(2)
assert w.device == torch.device("cpu") and w.tolist() == [1.0, 1.0]

# storage resizing (what FSDP2 does to free and refill a parameter) and pinned host memory
s = a.untyped_storage()
s.resize_(0)
assert s.nbytes() == 0
s.resize_(48)
assert s.nbytes() == 48
pinned = torch.ones(4).pin_memory()
assert pinned.is_pinned() and not torch.ones(4).is_pinned()

# streams and events are the emulator's ACL streams and events
st = torch.npu.Stream()
assert isinstance(st, AclStream) and isinstance(torch.npu.current_stream(), AclStream)
assert isinstance(st, torch.Stream) and st.device == torch.device("npu", 1)   # what record_stream takes
b.record_stream(st)
with torch.npu.stream(st):
    assert torch.npu.current_stream() is st
ev = torch.npu.Event()
ev.record(st)
ev.synchronize()
assert ev.query() and st.query()
torch.npu.synchronize()

# freed blocks wait in the device's cache; empty_cache gives them back to the emulator's aclrtFree
freed = torch.empty(1 << 16, device="npu")
start = freed.data_ptr()
del freed
assert device_memory.find(start) is not None
torch.npu.empty_cache()
assert device_memory.find(start) is None or device_memory.find(start)[0] != start

# torch's current npu is ACL's current device: hcomm.set_device (aclrtSetDevice) moves it too, as on CANN
import hcomm
hcomm.set_device(2)
assert torch.npu.current_device() == 2 and torch.zeros(1, device="npu").device == torch.device("npu", 2)

# limits, named
for bad, expected in ((lambda: torch.zeros(1, device="npu:3"), "npu:3 is not a device of the emulator: it has 3"),
                      (lambda: torch.npu.set_device(5), "the emulator has npu:0..npu:2"),
                      (lambda: torch.npu.Event(interprocess=True), "no IPC events"),
                      (lambda: torch.npu.set_rng_state([1, 2]), "new_state=list; expected the torch.uint8 tensor"),
                      (lambda: torch.npu.get_rng_state(3), "npu:3 is not a device of the emulator"),
                      (lambda: b.to_sparse(), "aten::_to_sparse on an npu tensor gives a Sparse tensor: the emulated "
                                              "npu device has strided tensors only")):
    try:
        bad()
    except Exception as exc:
        assert expected in str(exc), exc
    else:
        raise AssertionError(expected)
print("device OK")
'''


@pytest.mark.slow
def test_the_device_does_what_torch_npu_does(npu_paths: Dict[str, str]) -> None:
    assert _run(DEVICE_PROGRAM, npu_paths, extra={"HCOMM_SIM_DEVICE_COUNT": "3"}).strip() == "device OK"


GENERATORS_PROGRAM = r"""
import torch
from torch.utils.checkpoint import checkpoint

# each device has its own generator, apart from the CPU's: npu draws leave torch.default_generator as it was
torch.npu.manual_seed(5)
cpu_state = torch.get_rng_state()
a = torch.randn(4, device="npu")
assert torch.equal(cpu_state, torch.get_rng_state())
torch.manual_seed(5)
assert torch.equal(a.cpu(), torch.randn(4))          # the same algorithm: the same numbers for the same seed
torch.npu.set_device(1)
torch.npu.manual_seed(9)                              # the current device's only
assert [g.initial_seed() for g in torch.npu.default_generators] == [5, 9] and torch.npu.initial_seed() == 9
torch.npu.manual_seed_all(11)
assert [g.initial_seed() for g in torch.npu.default_generators] == [11, 11]
torch.manual_seed(3)                                  # torch's: the CPU and every npu device
assert [g.initial_seed() for g in torch.npu.default_generators] == [3, 3] and torch.initial_seed() == 3

# get/set_rng_state, per device and for all; a draw on another device or the CPU in between changes nothing
state, states = torch.npu.get_rng_state(), torch.npu.get_rng_state_all()
x = torch.rand(3, device="npu")
torch.rand(5), torch.rand(5, device="npu:0")
torch.npu.set_rng_state(state)
assert torch.equal(torch.rand(3, device="npu").cpu(), x.cpu())
torch.npu.set_rng_state_all(states)
assert torch.equal(torch.rand(3, device="npu:1").cpu(), x.cpu())
assert torch.equal(torch.npu.get_rng_state("npu:0"), states[0])

# dropout draws from the device's generator (torch routes it to native_dropout, which takes no generator)
torch.npu.manual_seed(1)
d1 = torch.nn.functional.dropout(torch.ones(64, device="npu"), 0.5)
torch.npu.manual_seed(1)
assert torch.equal(torch.nn.functional.dropout(torch.ones(64, device="npu"), 0.5).cpu(), d1.cpu())
assert set(d1.cpu().tolist()) == {0.0, 2.0}

# activation checkpointing replays the forward with the device's saved state: dropout masks and gradients equal
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Dropout(0.5), torch.nn.Linear(32, 1)).npu()
inp = torch.randn(16, 8).npu()
grads = []
for use_checkpoint in (False, True):
    torch.npu.manual_seed(2)
    net.zero_grad()
    out = checkpoint(net, inp, use_reentrant=False) if use_checkpoint else net(inp)
    out.sum().backward()
    grads.append([p.grad.cpu().clone() for p in net.parameters()])
assert all(torch.equal(g, h) for g, h in zip(*grads))

# a generator of its own (the arguments' checks are in the device program's limits)
g = torch.Generator(device="npu").manual_seed(4)
expected = torch.randn(3, generator=torch.Generator().manual_seed(4))
assert torch.equal(torch.randn(3, device="npu", generator=g).cpu(), expected)
print("generators OK")
"""


def test_npu_generators_as_torch_npu_scripts_use_them(npu_paths: Dict[str, str]) -> None:
    assert _run(GENERATORS_PROGRAM, npu_paths, extra={"HCOMM_SIM_DEVICE_COUNT": "2"}).strip() == "generators OK"


# ------------------------------------------------------------------ the seed's programs, under hcomm run
SEED_RUNS = [  # program, ranks, the globals shown, what each rank must show (hcomm.set_device(n) makes npu:n current)
    ("p2p.py", 2, ["data"], None),
    ("pipeline.py", 3, ["outputs"], {0: "[]", 1: "[]", 2: "[" + ", ".join(
        "npu:2:" + str([[float(2 * i + 1)] * 8] * 4) for i in range(3)) + "]"}),
    ("ring.py", 4, ["data"], {r: f"npu:{r}:" + str([float(k * i) for i in range(10)]) for r, k in
                              enumerate((2, 4, 6, 4))}),
    ("nonblocking.py", 2, ["batch"], {0: "[]", 1: "[npu:1:[0, 1, 2, 3, 4], npu:1:[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], "
                                                  "npu:1:[-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0]]"}),
]


@pytest.mark.slow
@pytest.mark.parametrize("program,n,names,expected", SEED_RUNS, ids=[r[0] for r in SEED_RUNS])
def test_seed_programs_as_written_under_hcomm_run(program: str, n: int, names: List[str],
                                                  expected: Optional[Dict[int, str]],
                                                  npu_paths: Dict[str, str]) -> None:
    """Plain ``hcomm run`` switches the device on (the variable is not set here)."""
    shm = private_shm_dir()
    try:
        cmd = launcher(n, sys.executable, str(CLIENTS / "show_globals.py"), str(SEED / program), *names,
                       module="hcomm_cffi")
        proc = start(cmd, {**npu_paths, "HCOMM_SIM_SHM_DIR": shm})
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, out + err
        assert os.listdir(shm) == []
    finally:
        os.rmdir(shm) if os.path.isdir(shm) and not os.listdir(shm) else None
    shown = dict(re.findall(r"^\[(\d+)\] SHOW \w+ (.*)$", out, re.M))
    assert len(shown) == n, out
    if expected is None:   # p2p: rank 1 received exactly rank 0's random tensor
        assert shown["0"].startswith("npu:0:") and shown["0"] == shown["1"], shown
    else:
        assert {int(r): v for r, v in shown.items()} == expected


@pytest.mark.slow
def test_every_comm_call_and_torch_operation_on_npu_tensors(npu_paths: Dict[str, str]) -> None:
    """The Comm API (collectives, out=, i*, stream= a torch.npu.Stream, send/recv) and backend "hccl"'s operations."""
    shm = private_shm_dir()
    proc = start(launcher(2, sys.executable, str(CLIENTS / "npu_every_call.py"), options=["--emulate-npu"],
                          module="hcomm_cffi"), {**npu_paths, "HCOMM_SIM_SHM_DIR": shm})
    out, err = proc.communicate(timeout=180)
    left = os.listdir(shm)
    os.rmdir(shm) if not left else None
    assert proc.returncode == 0 and left == [], out + err
    assert "[0] rank 0: every call OK on npu:0" in out and "[1] rank 1: every call OK on npu:1" in out, out


def test_hcomm_run_switches_the_device_on_unless_told_not_to(npu_paths: Dict[str, str]) -> None:
    """auto by default (the environment's value kept), 1 with --emulate-npu, 0 with --no-emulate-npu: an option
    overrides the environment."""
    show = ("-c", "import os; print('switch', os.environ.get('HCOMM_EMULATE_NPU'))")
    for options, env, want in (([], {}, "switch auto"), ([], {"HCOMM_EMULATE_NPU": "0"}, "switch 0"),
                               (["--emulate-npu"], {}, "switch 1"),
                               (["--emulate-npu"], {"HCOMM_EMULATE_NPU": "auto"}, "switch 1"),
                               (["--no-emulate-npu"], {"HCOMM_EMULATE_NPU": "1"}, "switch 0")):
        proc = start(launcher(1, sys.executable, *show, options=options, module="hcomm_cffi"), {**npu_paths, **env})
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and want in out, (options, env, out + err)
    proc = start(launcher(1, sys.executable, *show, options=["--emulate-npu", "--no-emulate-npu"],
                          module="hcomm_cffi"), npu_paths)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "not allowed with argument" in err, out + err


CPU_FSDP2 = r'''
import sys
import torch, torch.distributed as dist
import hcomm_cffi.torch  # noqa: F401
from torch.distributed.fsdp import fully_shard
dist.init_process_group(backend=sys.argv[1])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
ref = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
ref.load_state_dict(model.state_dict())
fully_shard(model)        # no mesh: FSDP2 builds it on torch's accelerator and moves the model there
x = torch.randn(4, 8)     # the same batch on every rank: the averaged gradient is the one-process gradient
model(x).sum().backward()
ref(x).sum().backward()
same = all(torch.allclose(p.grad.full_tensor().cpu(), q.grad, rtol=1e-5, atol=1e-6)
           for p, q in zip(model.parameters(), ref.parameters()))
print("rank", dist.get_rank(), "accelerator", torch._C._get_accelerator().type, "params on",
      sorted({str(p.device) for p in model.parameters()}), "gradients equal the reference", same, flush=True)
dist.destroy_process_group()
'''


@pytest.mark.slow
def test_a_cpu_fsdp2_script_under_hcomm_run_does_what_it_does_beside_torch_npu(npu_paths: Dict[str, str],
                                                                                tmp_path: Path) -> None:
    """The device is torch's accelerator under hcomm run, as torch_npu's is on an Ascend machine: fully_shard without
    a mesh moves a CPU model to npu:<rank> (tensor.data = an npu tensor, which torch_npu allows), and trains it over
    a backend that serves npu tensors; a gloo group serves cpu and cuda only, so it stops, as it does beside
    torch_npu; --no-emulate-npu keeps the CPU (that gloo run, the reference, is run again once on gloo's teardown
    abort, as in _torchrun)."""
    script = tmp_path / "fsdp_cpu.py"
    script.write_text(CPU_FSDP2)
    outputs = {}
    for backend, options in (("hcomm", []), ("gloo", []), ("gloo", ["--no-emulate-npu"])):
        shm = private_shm_dir()
        ended: List[Tuple[int, str, str]] = []

        def run() -> Tuple[int, str]:
            proc = start(launcher(2, sys.executable, str(script), backend, options=options, module="hcomm_cffi"),
                         {**npu_paths, "HCOMM_SIM_SHM_DIR": shm})
            out, err = proc.communicate(timeout=180)
            ended.append((proc.returncode, out, err))
            return proc.returncode, out + err

        _gloo_reference(run) if options else run()
        left = os.listdir(shm)
        os.rmdir(shm) if not left else None
        assert left == [], left
        outputs[(backend, bool(options))] = ended[-1]
    code, out, err = outputs[("hcomm", False)]
    assert code == 0, out + err
    for rank in (0, 1):
        assert f"[{rank}] rank {rank} accelerator npu params on ['npu:{rank}'] gradients equal the reference True" \
            in out, out
    code, out, err = outputs[("gloo", False)]
    assert code != 0 and "No backend type associated with device type npu" in out + err, out + err
    code, out, err = outputs[("gloo", True)]
    assert code == 0, out + err
    for rank in (0, 1):
        assert f"[{rank}] rank {rank} accelerator cpu params on ['cpu'] gradients equal the reference True" in out, out


# ------------------------------------------------------------------ torch_npu-shaped scripts
DDP_NPU = r'''
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.npu.set_device(local_rank)
dist.init_process_group(backend="hccl")
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).npu()
ddp = DDP(model, device_ids=[local_rank])
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
data = torch.randn(3, world * 4, 8, generator=torch.Generator().manual_seed(1))
for step in range(3):
    x = data[step][rank * 4:(rank + 1) * 4].to(f"npu:{local_rank}")
    loss = ddp(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.npu.synchronize()
torch.save(model.state_dict(), sys.argv[1] + f".{rank}")
print(f"rank {rank} trained on {x.device}", flush=True)
dist.destroy_process_group()
'''

#: the same math on CPU with gloo: what differs from the torch_npu script, spelled out
CPU_EDITS = (('torch.npu.set_device(local_rank)', 'pass'), ('backend="hccl"', 'backend="gloo"'), ('.npu()', ''),
             ('DDP(model, device_ids=[local_rank])', 'DDP(model)'), ('.to(f"npu:{local_rank}")', ''),
             ('torch.npu.synchronize()', 'pass'))


def _npu_and_cpu_runs(npu_script: str, cpu_edits: "tuple[tuple[str, str], ...]", npu_paths: Dict[str, str],
                      tmp_path: Path) -> "tuple[Dict[str, List[Dict[str, object]]], str]":
    """The torch_npu-shaped script with the switch, and its CPU/gloo edit without, each under torchrun on 2 ranks;
    every rank saves a state dict to argv[1].<rank>: both runs' (npu first) and the npu run's output."""
    import torch

    cpu_script = npu_script
    for old, new in cpu_edits:
        assert old in cpu_script, old
        cpu_script = cpu_script.replace(old, new)
    results, npu_out = {}, ""
    for name, script, switch in (("npu", npu_script, "1"), ("cpu", cpu_script, "0")):
        path = tmp_path / f"{name}.py"
        path.write_text(script)
        done = _torchrun(path, [str(tmp_path / name)], {**npu_paths, "HCOMM_EMULATE_NPU": switch},
                         gloo_reference=name == "cpu")
        results[name] = [torch.load(tmp_path / f"{name}.{r}", map_location="cpu") for r in range(2)]
        npu_out = npu_out or done.stdout
    return results, npu_out


@pytest.mark.slow
def test_ddp_script_in_torch_npu_shape_equals_gloo_on_cpu_bit_for_bit(npu_paths: Dict[str, str],
                                                                      tmp_path: Path) -> None:
    import torch

    results, npu_out = _npu_and_cpu_runs(DDP_NPU, CPU_EDITS, npu_paths, tmp_path)
    assert "rank 0 trained on npu:0" in npu_out and "rank 1 trained on npu:1" in npu_out
    for got, want in zip(results["npu"], results["cpu"]):
        assert list(got) == list(want) and all(torch.equal(got[k], want[k]) for k in want)


@pytest.mark.slow
def test_the_vendor_pytorch_sample_shape_prints_its_readme_output(npu_paths: Dict[str, str]) -> None:
    """import torch_npu, mp.spawn over torch_npu.npu.device_count() ranks, init_method tcp://, device="npu"."""
    shm = private_shm_dir()
    done = _python([str(CLIENTS / "torch_npu_allreduce.py"), str(_free_port())],
                   {**npu_paths, "HCOMM_EMULATE_NPU": "1", "HCOMM_SIM_DEVICE_COUNT": "4", "HCOMM_SIM_SHM_DIR": shm},
                   timeout=240)
    left = os.listdir(shm)
    os.rmdir(shm) if not left else None
    assert done.returncode == 0 and left == [], done.stdout + done.stderr
    # the ranks print concurrently: a line of one may run into another's
    lines = set(re.findall(r"\[Rank \d\] \w+: tensor\(.*?device='npu:\d'\)", done.stdout))
    assert "Available NPU count: 4" in done.stdout
    for r in range(4):
        assert f"[Rank {r}] Input: tensor([0., 1., 2., 3., 4., 5., 6., 7.], device='npu:{r}')" in lines, done.stdout
        assert f"[Rank {r}] Output: tensor([ 0.,  4.,  8., 12., 16., 20., 24., 28.], device='npu:{r}')" in lines


FSDP2_NPU = r"""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

local_rank = int(os.environ["LOCAL_RANK"])
torch.npu.set_device(local_rank)
dist.init_process_group(backend="hccl")
rank, world = dist.get_rank(), dist.get_world_size()


def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


model = build().npu()
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)       # parameters resharded after forward: their storage is resized to 0 and back
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ref = build()            # the same math in one process on CPU, over every rank's batch
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
data = torch.randn(3, world, 4, 8, generator=torch.Generator().manual_seed(1))
for step in range(3):
    loss = model(data[step][rank].npu()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    ref_opt.zero_grad()
    sum(ref(data[step][r]).pow(2).mean() for r in range(world)).div(world).backward()
    ref_opt.step()
shards = [p.to_local() for p in model.parameters()]
full = [p.full_tensor() for p in model.parameters()]
assert all(s.device == torch.device("npu", local_rank) for s in shards)
assert all(torch.allclose(f.cpu(), r, rtol=1e-5, atol=1e-6) for f, r in zip(full, ref.parameters()))
print(f"rank {rank} FSDP2 on {shards[0].device}: parameters equal the reference", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_fsdp2_on_npu_tensors_with_hccl(npu_paths: Dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "fsdp2_npu.py"
    path.write_text(FSDP2_NPU)
    done = _torchrun(path, [], {**npu_paths, "HCOMM_EMULATE_NPU": "1"})
    for r in range(2):
        assert f"rank {r} FSDP2 on npu:{r}: parameters equal the reference" in done.stdout, done.stdout


TP_NPU = r"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

local_rank = int(os.environ["LOCAL_RANK"])
torch.npu.set_device(local_rank)
dist.init_process_group(backend="hccl")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("npu", (world,))

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).npu()
model = parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
data = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(1))
for step in range(3):
    loss = model(data[step].npu()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.npu.synchronize()
shards = sorted({str(p.to_local().device) for p in model.parameters()})
torch.save({k: v.full_tensor().cpu() for k, v in model.state_dict().items()}, sys.argv[1] + f".{rank}")
print(f"rank {rank} TP shards on {shards}", flush=True)
dist.destroy_process_group()
"""

#: the same math on CPU with gloo
TP_CPU_EDITS = (('torch.npu.set_device(local_rank)', 'pass'), ('backend="hccl"', 'backend="gloo"'),
                ('init_device_mesh("npu"', 'init_device_mesh("cpu"'), ('.npu()', ''),
                ('torch.npu.synchronize()', 'pass'))


@pytest.mark.slow
def test_tensor_parallel_on_npu_tensors_with_hccl_equals_gloo_on_cpu_bit_for_bit(npu_paths: Dict[str, str],
                                                                                  tmp_path: Path) -> None:
    """ColwiseParallel then RowwiseParallel over a 2-rank npu mesh (DTensor's redistributions and the row-wise
    partial sums go through backend hccl), trained 3 steps; the full parameters equal torch's TP on CPU with gloo."""
    import torch

    results, npu_out = _npu_and_cpu_runs(TP_NPU, TP_CPU_EDITS, npu_paths, tmp_path)
    assert "rank 0 TP shards on ['npu:0']" in npu_out and "rank 1 TP shards on ['npu:1']" in npu_out
    for got, want in zip(results["npu"], results["cpu"]):
        assert list(got) == list(want) == ["0.weight", "0.bias", "2.weight", "2.bias"]
        assert all(torch.equal(got[k], want[k]) for k in want)
