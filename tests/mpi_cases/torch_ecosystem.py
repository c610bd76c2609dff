"""sparcml.torch with PyTorch's and Horovod's habits, on any P: DistributedOptimizer as a
torch.optim.Optimizer (LR schedulers, state dicts), gradient accumulation, add_param_group,
Inf/NaN with GradScaler (every rank skips alike) and without (NaN on every rank alike), half-precision parameters, Horovod's argument
names; and the DDP communication hook (gloo process group beside MPI) against the optimizer.

Run with ``python -m mpi4py``; rank 0 prints ``TORCH-ECOSYSTEM <n> OK``.
"""

import copy
import warnings

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.nn.parallel import DistributedDataParallel as DDP

import sparcml
import sparcml.torch as st
from sparcml.compression import build
from sparcml.compression._objects import Compression, ResidualMemory, TopKCompressor
from sparcml.torch._hooks import SparcmlHookState, init_process_group, sparcml_hook

from _mpi_checks import ok, passed

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
B = 4  # rows per rank


def make_model(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    return m.to(dtype)


def mine(step, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 + step)
    X = torch.randn(P * B, 6, generator=g).to(dtype)
    y = torch.randint(0, 3, (P * B,), generator=g)
    return X[rank * B:(rank + 1) * B], y[rank * B:(rank + 1) * B]


def loss_of(model, X, y):
    return torch.nn.functional.cross_entropy(model(X).float(), y)


def flat(model):
    return torch.cat([p.detach().float().reshape(-1) for p in model.parameters()]).numpy()


def identical_everywhere(arr):
    b = np.ascontiguousarray(arr).tobytes()
    return all(x == b for x in comm.allgather(b))


def raises(exc_type, needle, fn):
    try:
        fn()
    except exc_type as exc:
        ok(needle in str(exc), f"{needle!r} not in {exc}")
        return
    ok(False, f"no {exc_type.__name__} ({needle})")


def wrap(model, **kw):
    return st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9),
                                   model.named_parameters(), **kw)


# 1. a torch.optim.Optimizer: LR schedulers, state dicts in PyTorch's layout -----------------
model = make_model()
opt = wrap(model)
ok(isinstance(opt, torch.optim.Optimizer), "DistributedOptimizer is an Optimizer")
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
with warnings.catch_warnings():
    warnings.simplefilter("error")  # e.g. "lr_scheduler.step() before optimizer.step()"
    for s in range(4):
        loss_of(model, *mine(s)).backward()
        opt.step()
        opt.zero_grad()
        sched.step()
ok(opt.param_groups[0]["lr"] == opt.optimizer.param_groups[0]["lr"] == 0.2 * 0.25,
   f"StepLR: lr {opt.param_groups[0]['lr']}")
ok(identical_everywhere(flat(model)), "StepLR run identical everywhere")
saved = opt.state_dict()
plain = torch.optim.SGD(make_model().parameters(), lr=1.0, momentum=0.9)
plain.load_state_dict(saved)  # PyTorch's own layout (plus the "sparcml" entry)
ok(plain.param_groups[0]["lr"] == 0.05 and len(plain.state) == 4, "a plain SGD loads it")
model2 = make_model()
opt2 = wrap(model2)
opt2.load_state_dict(plain.state_dict())  # a plain state: into the wrapped optimizer
ok(opt2.param_groups[0]["lr"] == 0.05 and opt2.step_count == 0, "loads a plain state")
opt2.load_state_dict(saved)
ok(opt2.step_count == 4, "loads its own state")
opt.remove_hooks()
opt2.remove_hooks()

# 2. gradient accumulation: backward_passes_per_step and no_sync() equal one backward of the
# summed loss; one pass too many raises --------------------------------------------------------
runs = {}
for how in ("sum", "passes", "no_sync"):
    model = make_model()
    opt = wrap(model, backward_passes_per_step=2 if how == "passes" else 1,
               compression=Compression(TopKCompressor(density=0.3)))
    for s in range(3):
        a, b = mine(2 * s), mine(2 * s + 1)
        if how == "sum":
            (loss_of(model, *a) + loss_of(model, *b)).backward()
        elif how == "passes":
            loss_of(model, *a).backward()
            ok(all(bk.request is None for bk in opt._buckets), "launched after one pass")
            loss_of(model, *b).backward()
        else:
            with opt.no_sync():
                loss_of(model, *a).backward()
            loss_of(model, *b).backward()
        opt.step()
        opt.zero_grad()
    runs[how] = flat(model)
    if how == "passes":
        loss_of(model, *a).backward()
        loss_of(model, *b).backward()
        raises(sparcml.SparcmlError, "backward_passes_per_step",
               lambda: loss_of(model, *a).backward())
        opt.step()  # goes on with the two passes reduced before (as at one pass per step)
        ok(identical_everywhere(flat(model)), "after a pass too many")
    opt.remove_hooks()
for how in ("passes", "no_sync"):
    ok(np.allclose(runs[how], runs["sum"], rtol=1e-5, atol=1e-6),
       f"{how}: max diff {np.abs(runs[how] - runs['sum']).max()}")
    ok(identical_everywhere(runs[how]), f"{how}: ranks differ")

# 3. add_param_group after wrapping is averaged; a group added behind its back raises ---------
model = make_model()
head = torch.nn.Linear(3, 2)
torch.manual_seed(0)
head.reset_parameters()
opt = wrap(model)
opt.add_param_group({"params": head.parameters(), "lr": 0.5})
for s in range(2):
    X, y = mine(s)
    torch.nn.functional.cross_entropy(head(model(X)), y % 2).backward()
    opt.synchronize()
    grads = comm.allgather(head.weight.grad.numpy().copy())
    ok(np.allclose(grads[0], head.weight.grad.numpy()), "the added group's gradient averaged")
    opt.step()
    opt.zero_grad()
ok(identical_everywhere(flat(head)) and identical_everywhere(flat(model)), "added group")
ok(len(opt.param_groups) == 2 and opt.param_groups[1]["lr"] == 0.5, "groups")
opt.optimizer.add_param_group({"params": [torch.nn.Parameter(torch.zeros(2))]})
loss_of(model, *mine(9)).backward()
raises(sparcml.IncompatibleOptionsError, "add_param_group() on the DistributedOptimizer",
       opt.step)
opt.remove_hooks()


# 4. Inf/NaN with GradScaler: every rank finds it, skips the step and lowers the scale alike ---
def scaled_run(use_ddp, compression, bad_rank, bad_step=1, steps=3, plain=False):
    model = make_model()
    before = []
    if use_ddp:
        ddp = DDP(model)
        ddp.register_comm_hook(SparcmlHookState(compression), sparcml_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.2)
        net = ddp
    else:
        opt = wrap(model, compression=compression)
        net = model
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    for s in range(steps):
        X, y = mine(s)
        if s == bad_step and rank == bad_rank:
            X = X.clone()
            X[0, 0] = float("inf")
        before.append(flat(model))
        scaler.scale(loss_of(net, X, y)).backward()
        if use_ddp or plain:  # plain: the AMP recipe as PyTorch documents it
            scaler.step(opt)
        else:
            opt.synchronize()
            scaler.unscale_(opt)
            with opt.skip_synchronize():
                scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        scales = comm.allgather(scaler.get_scale())
        ok(len(set(scales)) == 1, f"step {s}: the ranks' scales differ: {scales}")
        moved = not np.array_equal(before[-1], flat(model))
        ok(moved == (s != bad_step), f"step {s}: moved={moved}")
        ok(identical_everywhere(flat(model)), f"step {s}: ranks differ")
    ok(scaler.get_scale() == 2.0 ** 9, f"scale {scaler.get_scale()}")
    if not use_ddp:
        for b in opt.buckets:
            ok(b["residual"] is None or np.isfinite(b["residual"]).all(), "residual finite")
        opt.remove_hooks()
    return model


for compression in (Compression(), Compression(TopKCompressor(density=0.3))):
    scaled_run(False, compression, bad_rank=P - 1)
with warnings.catch_warnings():  # torch's notice that it will stop passing the scaler
    warnings.simplefilter("ignore", FutureWarning)
    scaled_run(False, Compression(), bad_rank=P - 1, plain=True)
    scaled_run(False, Compression(TopKCompressor(density=0.3)), bad_rank=0, plain=True)
# without GradScaler: a NaN on one rank raises nothing; its bucket's averaged gradients are NaN
# on every rank alike (the README's PyTorch section says so), and the next step is finite again
for compression in (Compression(), Compression(TopKCompressor(density=0.3))):
    model = make_model()
    opt = wrap(model, compression=compression)
    X, y = mine(0)
    if rank == P - 1:
        X = X.clone()
        X[0, 0] = float("nan")
    loss_of(model, X, y).backward()
    opt.synchronize()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()
    ok(np.isnan(grads).all(), "a NaN on one rank: every averaged gradient NaN on every rank")
    ok(identical_everywhere(grads), "the NaN gradients differ between ranks")
    opt.zero_grad()
    loss_of(model, *mine(1)).backward()
    opt.synchronize()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).numpy()
    ok(np.isfinite(grads).all() and identical_everywhere(grads), "the next step's gradients")
    opt.zero_grad()
    opt.remove_hooks()
# clipping before synchronize(): the in-place change is detected on every rank
model = make_model()
opt = wrap(model)
loss_of(model, *mine(0)).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
raises(sparcml.SparcmlError, "synchronize() first", opt.step)
opt.remove_hooks()

# 5. half-precision parameters: averaged in float32, identical everywhere ----------------------
for dtype in (torch.bfloat16, torch.float16):
    model = make_model(dtype)
    opt = wrap(model, bucket_bytes=64)
    ok(all(b["dtype"] == "float32" for b in opt.buckets), "half travels as float32")
    for s in range(2):
        loss_of(model, *mine(s, dtype)).backward()
        local = [p.grad.float().clone() for p in model.parameters()]
        every = comm.allgather([g.numpy() for g in local])
        opt.synchronize()
        for i, p in enumerate(model.parameters()):
            want = torch.from_numpy(np.mean([e[i] for e in every], axis=0)).to(dtype)
            ok(p.grad.dtype == dtype and torch.allclose(p.grad.float(), want.float(),
                                                          rtol=1e-2, atol=1e-3),
               f"{dtype}: averaged gradient")
        opt.step()
        opt.zero_grad()
    ok(identical_everywhere(flat(model)), f"{dtype}: ranks differ")
    opt.remove_hooks()

# 6. Horovod's argument names -------------------------------------------------------------------
model = make_model(seed=rank)
st.broadcast_parameters(model.state_dict(), root_rank=0)
ok(identical_everywhere(flat(model)), "broadcast_parameters(root_rank=0)")
opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                              named_parameters=model.named_parameters(),
                              compression=Compression(), backward_passes_per_step=1)
loss_of(model, *mine(0)).backward()
opt.step()
st.broadcast_optimizer_state(opt, root_rank=0)
ok(identical_everywhere(flat(model)), "Horovod's keywords")
opt.remove_hooks()
raises(sparcml.IncompatibleOptionsError, "sparcml always averages",
       lambda: st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op="Sum"))

# 7. the DDP communication hook: the same result as the optimizer wrapper ------------------------
# DDP's first iteration has its buckets in forward order, later ones in the order the
# gradients came (the optimizer's): top-k over a bucket does not depend on the order, and the
# residuals move with their parameters; QSGD's buckets of values do, so that run warms up with
# one full step (as PowerSGD's start_powerSGD_iter)
init_process_group()
for name, compression, warmup in (
        ("full", Compression(), 0), ("dense", Compression.none(), 0),
        ("topk", Compression(TopKCompressor(density=0.2), None, ResidualMemory()), 0),
        ("topk+qsgd", Compression(TopKCompressor(density=0.3),
                                  sparcml.QSGD(4, bucket_size=16)), 1),
        # the rebuild moves DGC's velocities, PowerSGD's Q per matrix, signum's momentum and
        # the step counts with their parameters (they were lost before: the hook then left
        # the optimizer's path at step 1)
        ("dgc", build("dgc", density=0.3, density_warmup_steps=3), 0),
        ("powersgd", build("powersgd", rank=2), 0),
        ("signum", build("signum", momentum=0.8), 0),
        # the device path (issue 35) on CPU tensors, in the optimizer and the hook alike
        ("topk device", Compression(TopKCompressor(density=0.2), None, ResidualMemory()), 0),
        ("dgc device", build("dgc", density=0.3, density_warmup_steps=3), 1),
        ("threshold device", build("threshold", threshold=0.05), 0)):
    device_path = {"device_path": True} if name.endswith(" device") else {}
    ref = make_model()
    ref_opt = wrap(ref, compression=compression, seed=4, warmup_steps=warmup, **device_path)
    ddp = DDP(make_model())
    state = SparcmlHookState(compression, seed=4, warmup_steps=warmup, **device_path)
    ddp.register_comm_hook(state, sparcml_hook)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=0.2, momentum=0.9)
    for s in range(4):
        loss_of(ref, *mine(s)).backward()
        ref_opt.step()
        ref_opt.zero_grad()
        loss_of(ddp, *mine(s)).backward()
        ddp_opt.step()
        ddp_opt.zero_grad()
        got, want = flat(ddp.module), flat(ref)
        ok(np.allclose(got, want, rtol=1e-6, atol=1e-7),
           f"{name} step {s}: hook and optimizer differ by {np.abs(got - want).max()}")
        ok(identical_everywhere(got), f"{name}: ranks differ under DDP")
    ok(state.step == 4 and (P == 1 or state.traffic.bytes_sent > 0), f"{name}: hook state")
    ref_opt.remove_hooks()
scaled_run(True, Compression(TopKCompressor(density=0.3)), bad_rank=P - 1)
raises(sparcml.IncompatibleOptionsError, "must be a SparcmlHookState",
       lambda: sparcml_hook(object(), None))
dist.destroy_process_group()

total = comm.allreduce(passed())
if rank == 0:
    print(f"TORCH-ECOSYSTEM {total // P} OK", flush=True)
