"""Small real models trained with torch's parallelism libraries, on one backend: the workloads of
``tests/test_torch_parallel.py``, which runs them on gloo and on hcomm and compares the bits.

:func:`job` is one rank of one multi-process job: it initialises the default group once and runs every
workload of its world size in turn (one job per backend and world size, not one per case), each workload
returning ``{name: tensor}`` of what it trained or saved on this rank: every parameter after the steps
(local shards and the full tensors), and every tensor a checkpoint holds.  Models are seeded alike on
every rank and both backends; each rank runs one intra-op thread (as torchrun and ``hcomm run`` set), so
the backend is the only difference between the two runs of a workload.
"""
from __future__ import annotations

import datetime
import os
import threading
from typing import Any, Callable, Dict, List, Tuple

import torch
import torch.distributed as dist
from torch import nn

Result = Dict[str, torch.Tensor]

#: the pipeline schedules of torch.distributed.pipelining covered; (class name, stages per rank, stage layout)
SCHEDULES: List[Tuple[str, int, str]] = [
    ("ScheduleGPipe", 1, "single"), ("Schedule1F1B", 1, "single"), ("ScheduleInterleaved1F1B", 2, "loop"),
    ("ScheduleLoopedBFS", 2, "loop"), ("ScheduleInterleavedZeroBubble", 2, "loop"),
    ("ScheduleZBVZeroBubble", 2, "v"), ("ScheduleDualPipeV", 2, "v"),
]
#: activations per microbatch: (rows, 4, 16) floats is 256 B per row, below the eager limit (64 KiB,
#: settings.DEFAULT_EAGER_LIMIT); (rows, 64, 64) is 16 KiB per row, 8 rows 128 KiB: above it
SMALL, LARGE = (4, 16), (64, 64)
STEPS = 2


def _params(prefix: str, module: nn.Module) -> Result:
    """Every parameter of ``module`` (a DTensor's full tensor and its local shard)."""
    from torch.distributed.tensor import DTensor
    out: Result = {}
    for name, p in module.named_parameters():
        if isinstance(p, DTensor):
            out[f"{prefix}.{name}.local"] = p.to_local().detach().clone()
            out[f"{prefix}.{name}"] = p.full_tensor().detach().clone()
        else:
            out[f"{prefix}.{name}"] = p.detach().clone()
    return out


# ---------------------------------------------------------------------------------------------- pipelining
class Block(nn.Module):
    """One pipeline stage: a Linear over the last dimension and tanh (activations keep their shape)."""

    def __init__(self, width: int, seed: int) -> None:
        super().__init__()
        torch.manual_seed(1000 + seed)
        self.lin = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x))


def _stage_ids(layout: str, rank: int, pp: int) -> List[int]:
    """The stages of ``rank``: one; looped (r, r + pp); or V-shaped (r, 2 pp - 1 - r)."""
    if layout == "single":
        return [rank]
    return [rank, rank + pp] if layout == "loop" else [rank, 2 * pp - 1 - rank]


def pipeline(rank: int, pp: int, schedule: str, layout: str, shape: Tuple[int, int], infer: bool,
             group: Any = None, tp_mesh: Any = None) -> Result:
    """Train a chain of Blocks for STEPS steps with ``schedule``; ``infer``: shapes found at run time (else given).

    With ``tp_mesh`` every Block is tensor parallel (Colwise then Rowwise halves, so a stage's output is
    funcol's AsyncCollectiveTensor, which the pipeline sends as is).
    """
    import torch.distributed.pipelining as pipelining
    from torch.distributed._functional_collectives import AsyncCollectiveTensor
    from torch.distributed.pipelining import PipelineStage
    per = 1 if layout == "single" else 2
    n_stages, micro, rows = pp * per, 2 * pp, 2
    width = shape[-1]
    stages, modules = [], []
    for sid in _stage_ids(layout, rank, pp):
        mod: nn.Module = Block(width, sid) if tp_mesh is None else TPBlock(width, sid, tp_mesh)
        modules.append((sid, mod))
        example = torch.zeros(rows, *shape)
        if tp_mesh is not None:   # what this workload is about: the stage's output is a wrapper without storage
            assert isinstance(mod(example), AsyncCollectiveTensor)
        kwargs = {} if infer else {"input_args": (example,), "output_args": (example,), "input_grads": (example,),
                                   "output_grads": (example,)}
        stages.append(PipelineStage(mod, sid, n_stages, torch.device("cpu"), group=group, **kwargs))
    cls = getattr(pipelining, schedule)
    loss_fn = lambda out, target: (out - target).pow(2).mean()  # noqa: E731
    sched = cls(stages[0] if per == 1 else stages, micro, loss_fn=loss_fn)
    opt = torch.optim.SGD([p for _, m in modules for p in m.parameters()], lr=0.5)
    gen = torch.Generator().manual_seed(7)
    out: Result = {}
    for step in range(STEPS):
        x = torch.randn(micro * rows, *shape, generator=gen)
        y = torch.randn(micro * rows, *shape, generator=gen)
        opt.zero_grad()
        first, last = 0 in [s for s, _ in modules], n_stages - 1 in [s for s, _ in modules]
        losses: List[torch.Tensor] = []
        args = (x,) if first else ()
        result = sched.step(*args, target=y if last else None, losses=losses if last else None)
        if last:
            out[f"loss{step}"] = torch.stack([loss.detach() for loss in losses])
            out[f"output{step}"] = result.detach().clone()
        opt.step()
    for sid, mod in modules:
        out.update(_params(f"stage{sid}", mod))
    return out


# ------------------------------------------------------------------------------------- tensor parallelism
class MLP(nn.Module):
    def __init__(self, width: int = 16, hidden: int = 32, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(self.norm(x))))


class TPBlock(nn.Module):
    """A Block of two Linears, Colwise then Rowwise over ``mesh`` (its output: an AsyncCollectiveTensor)."""

    def __init__(self, width: int, seed: int, mesh: Any) -> None:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
        super().__init__()
        torch.manual_seed(2000 + seed)
        self.a, self.b = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)
        parallelize_module(self, mesh, {"a": ColwiseParallel(), "b": RowwiseParallel()})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.tanh(self.a(x)))    # Rowwise's output as is: the AsyncCollectiveTensor the stage sends


def _train(model: nn.Module, batches: List[torch.Tensor], prefix: str, lr: float = 0.1) -> Result:
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    out: Result = {}
    for i, x in enumerate(batches):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        full = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        out[f"{prefix}.loss{i}"] = full.detach().clone()
    out.update(_params(prefix, model))
    return out


def _batches(seed: int, shape: Tuple[int, ...], count: int = STEPS) -> List[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen) for _ in range(count)]


def tensor_parallel(rank: int, n: int) -> Result:
    """Colwise/Rowwise MLP (TP), and the same with sequence parallel (LayerNorm sharded on the sequence)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
    mesh = init_device_mesh("cpu", (n,))
    out: Result = {}
    tp = parallelize_module(MLP(seed=1), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    out.update(_train(tp, _batches(11, (4, 16)), "tp"))
    sp = parallelize_module(MLP(seed=2), mesh, {
        "norm": SequenceParallel(),
        "up": ColwiseParallel(input_layouts=Shard(1)),
        "down": RowwiseParallel(output_layouts=Shard(1)),
    })
    seq = [torch.cat([b] * n, 1) for b in _batches(12, (2, 2, 16))]   # sequence 2 n: Shard(1) splits it evenly
    out.update(_train(sp, seq, "sp"))
    return out


# ------------------------------------------------------------------------------------------------- FSDP2
def _fully_shard(model: MLP, mesh: Any) -> MLP:
    from torch.distributed.fsdp import fully_shard
    for layer in (model.up, model.down):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def fsdp(rank: int, n: int) -> Result:
    """FSDP2 over every rank; HSDP (replicate x shard); FSDP x TP (2-D mesh, TP inside)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    out: Result = {}
    mine = lambda seed, rows: [b[rank * rows:(rank + 1) * rows] for b in _batches(seed, (n * rows, 16))]  # noqa: E731
    out.update(_train(_fully_shard(MLP(seed=3), init_device_mesh("cpu", (n,))), mine(13, 2), "fsdp"))
    hsdp_mesh = init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("replicate", "shard"))
    out.update(_train(_fully_shard(MLP(seed=4), hsdp_mesh), mine(14, 2), "hsdp"))
    if n >= 4:
        mesh = init_device_mesh("cpu", (n // 2, 2), mesh_dim_names=("dp", "tp"))
        model = parallelize_module(MLP(seed=5), mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        dp = mesh["dp"].get_local_rank()
        batches = [b[dp * 2:(dp + 1) * 2] for b in _batches(15, (n // 2 * 2, 16))]
        out.update(_train(_fully_shard(model, mesh["dp"]), batches, "fsdp_tp"))
    return out


# -------------------------------------------------------------------------------------- expert parallel
def expert_parallel(rank: int, n: int) -> Result:
    """One expert per rank; each rank's tokens routed by a fixed rule (uneven counts per expert) with
    ``all_to_all_single`` (functional collectives' autograd form) there and back."""
    from torch.distributed._functional_collectives import all_to_all_single_autograd
    torch.manual_seed(100 + rank)
    expert = nn.Linear(8, 8)
    opt = torch.optim.SGD(expert.parameters(), lr=0.1)
    out: Result = {}
    for step in range(STEPS):
        gen = torch.Generator().manual_seed(50 + 10 * step + rank)
        tokens = torch.randn(5 + 3 * rank, 8, generator=gen)
        dest = (torch.arange(tokens.shape[0]) * (rank + 1) + step) % n      # uneven, rank-dependent routing
        order = torch.argsort(dest, stable=True)
        send_counts = torch.bincount(dest, minlength=n)
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        ins, outs = send_counts.tolist(), recv_counts.tolist()
        world = dist.group.WORLD
        got = all_to_all_single_autograd(tokens[order], outs, ins, world)
        back = all_to_all_single_autograd(torch.tanh(expert(got)), ins, outs, world)
        mixed = torch.empty_like(back).index_copy(0, order, back)
        opt.zero_grad()
        loss = (mixed - tokens).pow(2).sum()
        loss.backward()
        opt.step()
        out[f"ep.loss{step}"] = loss.detach().clone()
    out.update(_params("ep", expert))
    return out


# ------------------------------------------------------------------------------------------- pipeline x TP
def pipeline_tp(rank: int, n: int) -> Result:
    """Pipeline over one mesh dimension, tensor parallel over the other (2 x 2): stage outputs are
    AsyncCollectiveTensors sent by eager isend."""
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
    pp_rank = mesh["pp"].get_local_rank()
    out: Result = {}
    for schedule, per, layout in (("Schedule1F1B", 1, "single"), ("ScheduleInterleaved1F1B", 2, "loop")):
        got = pipeline(pp_rank, 2, schedule, layout, SMALL, False, group=mesh["pp"].get_group(), tp_mesh=mesh["tp"])
        out.update({f"pp_tp.{schedule}.{k}": v for k, v in got.items()})
    return out


# ------------------------------------------------------------------------------------------- checkpoints
def _consolidated(path: str) -> Result:
    """A DCP checkpoint as one full state dict (torch's format_utils: every tensor it holds)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(path, path + ".pt")
    sd = torch.load(path + ".pt", weights_only=True)
    os.remove(path + ".pt")
    return {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}


def checkpoints(rank: int, n: int, base: str, backend: str) -> Result:
    """FSDP2 save -> TP load; broadcast_from_rank0 into FSDP2; async_save on a group of its own while the
    default group trains; each checkpoint consolidated to a full state dict on rank 0."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                         set_model_state_dict)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (n,))
    out: Result = {}
    model = _fully_shard(MLP(seed=6), mesh)
    out.update(_train(model, [b[rank * 2:(rank + 1) * 2] for b in _batches(16, (2 * n, 16))], "dcp.fsdp"))
    saved = os.path.join(base, "fsdp")
    dcp.save(get_model_state_dict(model), checkpoint_id=saved)
    tp = parallelize_module(MLP(seed=99), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    sd = get_model_state_dict(tp)
    dcp.load(sd, checkpoint_id=saved)
    set_model_state_dict(tp, sd)
    out.update(_params("dcp.tp_loaded", tp))
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    out.update({f"dcp.full.{k}": v.clone() for k, v in full.items()})
    fresh = _fully_shard(MLP(seed=100 + rank), mesh)       # different on every rank until rank 0's arrives
    set_model_state_dict(fresh, full if rank == 0 else {},
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    out.update(_params("dcp.broadcast", fresh))
    dist.barrier()
    if rank == 0:
        out.update({f"dcp.saved.{k}": v for k, v in _consolidated(saved).items()})
    # async_save on its own group (torch's recommended set-up) while the default group trains on
    ckpt_group = dist.new_group(backend=backend)
    later = os.path.join(base, "async")
    future = dcp.async_save(get_model_state_dict(model), checkpoint_id=later, process_group=ckpt_group)
    threads = {t.name for t in threading.enumerate()}
    out.update(_train(model, [b[rank * 2:(rank + 1) * 2] for b in _batches(17, (2 * n, 16), 3)], "dcp.busy"))
    future.result(timeout=60)
    assert len(threads) > 1, threads            # the save ran on a thread of its own
    dist.barrier()
    if rank == 0:
        out.update({f"dcp.async.{k}": v for k, v in _consolidated(later).items()})
    dist.destroy_process_group(ckpt_group)
    return out


# ---------------------------------------------------------------------------------------------------- jobs
def preload() -> None:
    """Import torch's parallelism libraries in the parent before it forks the ranks: each rank importing
    them on its own costs seconds of CPU (pipelining, DTensor, DCP), every job, on every rank."""
    import torch.distributed.checkpoint  # noqa: F401
    import torch.distributed.checkpoint.format_utils  # noqa: F401
    import torch.distributed.checkpoint.state_dict  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.pipelining  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401


def workloads(n: int, base: str, backend: str) -> List[Tuple[str, Callable[[int], Result]]]:
    """(name, body(rank)) of every workload at world size ``n``."""
    todo: List[Tuple[str, Callable[[int], Result]]] = []
    for schedule, per, layout in SCHEDULES:
        for infer in (True, False):
            for label, shape in (("small", SMALL), ("large", LARGE)):
                if label == "large" and infer:
                    continue       # one large-message run per schedule: explicit shapes
                name = f"pipeline {schedule} {'inferred' if infer else 'given'} shapes, {label} messages"
                todo.append((name, lambda r, s=schedule, p=per, lay=layout, sh=shape, i=infer:
                             pipeline(r, n, s, lay, sh, i)))
    todo += [("TP and SP", lambda r: tensor_parallel(r, n)),
             ("FSDP2, HSDP" + (", FSDP x TP" if n >= 4 else ""), lambda r: fsdp(r, n)),
             ("expert parallel (all_to_all_single, uneven)", lambda r: expert_parallel(r, n)),
             ("DCP", lambda r: checkpoints(r, n, os.path.join(base, f"{backend}-{n}"), backend))]
    if n == 4:
        todo.append(("pipeline x TP (2 x 2)", lambda r: pipeline_tp(r, n)))
    return todo


def job(rank: int, n: int, root: bytes, port: int, backend: str, base: str) -> Dict[str, Dict[str, Any]]:
    """One rank: every workload of world size ``n`` on ``backend``; {workload: {name: numpy array}} (numpy: a
    torch tensor crosses to the parent through a file descriptor that closes with this process); a failure
    raises."""
    import hcomm_cffi.torch  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)       # what torchrun and hcomm run set for every rank (OMP_NUM_THREADS=1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n,
                            timeout=datetime.timedelta(seconds=60))
    results: Dict[str, Dict[str, Any]] = {}
    try:
        for name, body in workloads(n, base, backend):
            results[name] = {k: v.detach().numpy().copy() for k, v in body(rank).items()}
    finally:
        dist.destroy_process_group()
    return results
