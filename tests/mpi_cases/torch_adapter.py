"""sparcml.torch on any P: dense equals plain SGD on the concatenated batch, identical parameters
with top-k + QSGD, exact residual bookkeeping per bucket, bitwise resume, collective errors.

Run with ``python -m mpi4py``; rank 0 prints ``TORCH-ADAPTER <n> OK``.
"""

import copy

import numpy as np
import torch
from mpi4py import MPI

import sparcml
import sparcml.torch as st

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
B = 5  # rows per rank
checks = 0


def ok(cond, what):
    global checks
    if not cond:
        raise AssertionError(f"rank {rank}: {what}")
    checks += 1


def make_model(dtype=torch.float32, seed=0, hidden=9):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(6, hidden), torch.nn.Tanh(),
                            torch.nn.Linear(hidden, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    return m.to(dtype)


def batch(step, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 + step)
    X = torch.randn(P * B, 6, generator=g).to(dtype)
    y = torch.randint(0, 3, (P * B,), generator=g)
    return X, y


def loss_of(model, X, y):
    return torch.nn.functional.cross_entropy(model(X), y)


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def identical_everywhere(arr):
    mine = arr.tobytes()
    return all(x == mine for x in comm.allgather(mine))


def train(model, opt, steps, start=0, dtype=torch.float32):
    for s in range(start, start + steps):
        X, y = batch(s, dtype)
        mine = slice(rank * B, (rank + 1) * B)
        loss_of(model, X[mine], y[mine]).backward()
        opt.step()
        opt.zero_grad()


# 1. no compression: the same parameters as plain SGD on the concatenated batch ---------------
for algorithm in ("dense", "ssar_recursive_double", "ssar_split_allgather"):
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        ref = make_model(dtype)
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.3, momentum=0.9)
        for s in range(4):
            X, y = batch(s, dtype)
            loss_of(ref, X, y).backward()
            ref_opt.step()
            ref_opt.zero_grad()
        model = make_model(dtype)
        opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.3, momentum=0.9),
                                      model.named_parameters(), algorithm=algorithm,
                                      bucket_size=64)
        ok(len(opt.buckets) >= 3, f"small buckets: {len(opt.buckets)}")
        train(model, opt, 4, dtype=dtype)
        ok(np.allclose(flat(model), flat(ref), rtol=tol, atol=tol),
           f"{algorithm} {dtype}: max diff {np.abs(flat(model) - flat(ref)).max()}")
        ok(identical_everywhere(flat(model)), f"{algorithm} {dtype}: ranks differ")
        ok(opt.stats.steps == 4 and opt.stats.sent_density == 1.0, "dense stats")

# 2. top-k (+ QSGD): identical parameters on all ranks ----------------------------------------
for algorithm in ("ssar_recursive_double", "ssar_split_allgather", "dsar_split_allgather",
                  "allgather", "dense", "auto"):
    for bits in (None, 2, 4, 8):
        if bits is not None and algorithm == "dense":
            continue
        model = make_model()
        opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9),
                                      model.named_parameters(), density=0.1, bits=bits,
                                      algorithm=algorithm, bucket_size=200,
                                      quantizer_bucket_size=4, seed=3)
        train(model, opt, 3)
        ok(identical_everywhere(flat(model)), f"top-k {algorithm} bits={bits}: ranks differ")
        ok(not np.array_equal(flat(model), flat(make_model())), "the model moved")

# 3. residual bookkeeping per bucket, exactly ------------------------------------------------
for bits, ef, tkb in ((None, True, None), (4, True, None), (2, True, 8), (8, False, None)):
    model = make_model(hidden=23)
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  model.named_parameters(), density=0.05, bits=bits,
                                  error_feedback=ef, bucket_size=300, topk_bucket_size=tkb,
                                  quantizer_bucket_size=3, seed=5)
    params = dict(model.named_parameters())
    residuals = [np.zeros(b["numel"], np.float32) for b in opt.buckets]
    for s in range(4):
        X, y = batch(s)
        mine = slice(rank * B, (rank + 1) * B)
        names = list(params)
        local = dict(zip(names, torch.autograd.grad(loss_of(model, X[mine], y[mine]),
                                                    [params[n] for n in names])))
        loss_of(model, X[mine], y[mine]).backward()
        opt.synchronize()
        averaged = {n: p.grad.detach().clone() for n, p in params.items()}
        opt.step()
        opt.zero_grad()
        sent_all = comm.allgather([b["sent"].to_dense() for b in opt.buckets])
        for i, b in enumerate(opt.buckets):
            g = np.concatenate([local[n].reshape(-1).numpy() for n in b["names"]])
            gp = g + residuals[i] if ef else g
            sent = b["sent"]
            idx = sent.indices
            topk = sparcml.TopK(density=0.05, bucket_size=tkb, error_feedback=False)
            ok(np.array_equal(idx, topk.compress(gp).indices), "the top-k of gradient + residual")
            if bits is None:
                ok(np.array_equal(sent.values, gp[idx]), "unquantized values sent as they are")
            else:
                q = sparcml.QSGD(bits, bucket_size=3)
                ok(np.array_equal(q.quantize(sent.values), sent.values),
                   "quantized values re-encode to themselves (exact on the wire)")
            if ef:
                rest = np.ones(b["numel"], bool)
                rest[idx] = False
                r = b["residual"]
                ok(np.array_equal(r[rest], gp[rest]), "residual = g + r where nothing was sent")
                ok(np.array_equal(r[idx], gp[idx] - sent.values), "residual = g' - sent")
                residuals[i] = r.copy()
            else:
                ok(b["residual"] is None, "no residual without error feedback")
            got = np.concatenate([averaged[n].reshape(-1).numpy() for n in b["names"]])
            if P <= 2:  # own message exact on the wire, one addition: the sum of what was sent
                want = sent_all[0][i] + sent_all[-1][i] if P == 2 else sent_all[0][i]
                ok(np.array_equal(got, want / P), f"P={P}: averaged = sum(sent) / P exactly")
            elif bits is None:
                want = np.sum([s_[i] for s_ in sent_all], axis=0)
                ok(np.allclose(got, want / P, rtol=1e-6, atol=1e-7), "averaged = sum(sent)/P")

# 4. resume: state_dict and load_state_dict continue bitwise ---------------------------------
for bits, warmup in ((4, 0), (None, 2)):
    def build():
        m = make_model(hidden=17)
        o = st.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.2, momentum=0.9),
                                    m.named_parameters(), density=0.05, bits=bits,
                                    bucket_size=256, warmup_steps=warmup, seed=11)
        return m, o

    model, opt = build()
    train(model, opt, 3)
    saved_model = copy.deepcopy(model.state_dict())
    saved_opt = copy.deepcopy(opt.state_dict())
    train(model, opt, 3, start=3)
    a = flat(model)
    model2, opt2 = build()
    model2.load_state_dict(saved_model)
    opt2.load_state_dict(saved_opt)
    train(model2, opt2, 3, start=3)
    ok(np.array_equal(a, flat(model2)), f"resumed run (bits={bits}, warmup={warmup}) differs")
    ok(opt2.step_count == 6 and opt.stats.dense_steps == min(warmup, 6), "step counts")
    if P > 1:
        other = copy.deepcopy(saved_opt)
        other["sparcml"]["rank"] = (rank + 1) % P
        try:
            opt2.load_state_dict(other)
            ok(False, "another rank's residuals accepted")
        except sparcml.SparcmlError as exc:
            ok("resume with the same number of ranks" in str(exc), str(exc))

# 5. broadcasts and collective errors ---------------------------------------------------------
model = make_model(seed=rank)  # different on every rank
st.broadcast_parameters(model)
ok(identical_everywhere(flat(model)) and np.array_equal(flat(model), flat(make_model(seed=0))),
   "broadcast_parameters gives every rank root's parameters")
inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_of(model, *batch(rank)).backward()
inner.step()
st.broadcast_optimizer_state(inner)
buf = inner.state[next(iter(model.parameters()))]["momentum_buffer"].numpy()
ok(identical_everywhere(buf), "broadcast_optimizer_state")

if P > 1:
    odd = make_model(hidden=9 + (rank == P - 1))
    try:
        st.DistributedOptimizer(torch.optim.SGD(odd.parameters(), lr=0.1), odd.named_parameters())
        ok(False, "different models accepted")
    except sparcml.RankMismatchError as exc:
        ok(f"on rank {P - 1}" in str(exc) and "weight" in str(exc), str(exc))
    try:
        st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                model.named_parameters(), density=0.01 * (1 + rank))
        ok(False, "different options accepted")
    except sparcml.RankMismatchError as exc:
        ok("density" in str(exc), str(exc))

for kwargs, err in (({"bits": 4, "algorithm": "dense"}, sparcml.IncompatibleOptionsError),
                    ({"algorithm": "ring"}, sparcml.UnknownAlgorithmError),
                    ({"density": 0.1, "k": 3}, sparcml.IncompatibleOptionsError),
                    ({"density": 0.0}, sparcml.IncompatibleOptionsError)):
    try:
        st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)
        ok(False, f"{kwargs} accepted")
    except err:
        ok(True, "")

st.broadcast_parameters(model)  # the plain step above moved every rank differently
opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), density=0.5)
loss_of(model, *batch(0)).backward()
try:
    loss_of(model, *batch(0)).backward()
    ok(False, "a second backward before step() accepted")
except sparcml.SparcmlError as exc:
    ok("accumulated twice" in str(exc), str(exc))
opt.synchronize()
opt.step()
opt.zero_grad()
with torch.no_grad():  # a parameter without a gradient counts as zeros, on every rank alike
    model[0].weight.requires_grad_(False)
loss_of(model, *batch(1)).backward()
model[0].weight.requires_grad_(True)
opt.step()
ok(identical_everywhere(flat(model)), "a missing gradient on every rank")
try:
    st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ok(False, "a second optimizer on the same parameters accepted")
except sparcml.IncompatibleOptionsError as exc:
    ok("remove_hooks" in str(exc), str(exc))
opt.remove_hooks()
opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1))
del opt  # a discarded optimizer neither reduces nor blocks a new one
opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), density=0.3)
loss_of(model, *batch(2)).backward()
opt.step()
ok(identical_everywhere(flat(model)) and opt.stats.steps == 1, "after re-wrapping")

total = comm.allreduce(checks)
if rank == 0:
    print(f"TORCH-ADAPTER {total // P} OK", flush=True)
