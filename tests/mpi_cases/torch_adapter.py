"""sparcml.torch on any P: dense equals plain SGD on the concatenated batch, identical parameters
with top-k + QSGD, exact residual bookkeeping per bucket, bitwise resume, collective errors.

Run with ``python -m mpi4py``; rank 0 prints ``TORCH-ADAPTER <n> OK``.
"""

import copy
import warnings

import numpy as np
import torch
from mpi4py import MPI

import sparcml
import sparcml.torch as st
from sparcml.compression._objects import (Compression, NoneCompressor, NoneMemory, ResidualMemory,
                                 TopKCompressor)
from sparcml._registry import get_algorithm

from _mpi_checks import ok, passed

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
B = 5  # rows per rank


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
for algorithm in (sparcml.DENSE_BASELINE, sparcml.DEFAULT_ALGORITHM, "ssar_split_allgather"):
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
                                      model.named_parameters(),
                                      compression=Compression.none(algorithm), bucket_bytes=64)
        ok(len(opt.buckets) >= 3, f"small buckets: {len(opt.buckets)}")
        train(model, opt, 4, dtype=dtype)
        ok(np.allclose(flat(model), flat(ref), rtol=tol, atol=tol),
           f"{algorithm} {dtype}: max diff {np.abs(flat(model) - flat(ref)).max()}")
        ok(identical_everywhere(flat(model)), f"{algorithm} {dtype}: ranks differ")
        ok(opt.stats.steps == 4 and opt.stats.sent_density == 1.0, "dense stats")


# 2. top-k (+ QSGD): identical parameters on all ranks ----------------------------------------
def topk(density=0.1, bits=None, algorithm=sparcml.DEFAULT_ALGORITHM, qbs=4, chunk=None,
         memory=None):
    q = None if bits is None else sparcml.QSGD(bits, bucket_size=qbs)
    return Compression(TopKCompressor(density=density, chunk=chunk), q,
                       ResidualMemory() if memory is None else memory, algorithm)


for algorithm in (*sparcml.ALGORITHMS, "auto"):
    for bits in (None, 2, 4, 8):
        if bits is not None and algorithm != "auto" \
                and not get_algorithm(algorithm).accepts_quantizer:
            continue
        model = make_model()
        opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9),
                                      model.named_parameters(),
                                      compression=topk(bits=bits, algorithm=algorithm),
                                      bucket_bytes=200, seed=3)
        train(model, opt, 3)
        ok(identical_everywhere(flat(model)), f"top-k {algorithm} bits={bits}: ranks differ")
        ok(not np.array_equal(flat(model), flat(make_model())), "the model moved")

# 3. residual bookkeeping per bucket, exactly: residual = g + r - sent, with sent the values as
# the other ranks received them (quantized once, by the wire); so per rank, over the steps,
# sum of gradients == sum of sent + residual ----------------------------------------------------
for bits, ef, chunk in ((None, True, None), (4, True, None), (2, True, 8), (8, False, None)):
    model = make_model(hidden=23)
    opt = st.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(),
        compression=topk(0.05, bits, qbs=3, chunk=chunk,
                         memory=ResidualMemory() if ef else NoneMemory()),
        bucket_bytes=300, seed=5)
    params = dict(model.named_parameters())
    residuals = [np.zeros(b["numel"], np.float32) for b in opt.buckets]
    inputs = [np.zeros(b["numel"], np.float64) for b in opt.buckets]
    delivered = [np.zeros(b["numel"], np.float64) for b in opt.buckets]
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
            sent = b["sent"].to_dense()
            idx = sparcml.TopK(density=0.05, bucket_size=chunk,
                               error_feedback=False).compress(gp).indices
            kept = np.zeros(b["numel"], bool)
            kept[idx] = True
            ok(not np.any(sent[~kept]), "values sent only at the top-k of gradient + residual")
            if bits is None:
                ok(np.array_equal(sent[kept], gp[kept]), "unquantized values sent as they are")
            else:
                level = np.abs(gp[kept]).max() / sparcml.QSGD(bits).levels * (1 + 1e-6)
                ok(np.all(np.abs(sent[kept] - gp[kept]) <= level), "within one QSGD level")
            if ef:
                r = b["residual"]
                ok(np.array_equal(r, gp - sent), "residual = g + r - sent, exactly")
                residuals[i] = r.copy()
                inputs[i] += g
                delivered[i] += sent
            else:
                ok(b["residual"] is None, "no residual without error feedback")
            got = np.concatenate([averaged[n].reshape(-1).numpy() for n in b["names"]])
            if P <= 2:  # quantized once, one addition: the sum of what was sent
                want = sent_all[0][i] + sent_all[-1][i] if P == 2 else sent_all[0][i]
                ok(np.array_equal(got, want / P), f"P={P}: averaged = sum(sent) / P exactly")
            elif bits is None:
                want = np.sum([s_[i] for s_ in sent_all], axis=0)
                ok(np.allclose(got, want / P, rtol=1e-6, atol=1e-7), "averaged = sum(sent)/P")
    if ef:
        for i in range(len(inputs)):
            ok(np.allclose(inputs[i], delivered[i] + residuals[i], rtol=0, atol=1e-6),
               "sum of gradients == sum of sent + residual")

# 4. resume: state_dict and load_state_dict continue bitwise ---------------------------------
for bits, warmup in ((4, 0), (None, 2)):
    def build():
        m = make_model(hidden=17)
        o = st.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.2, momentum=0.9),
                                    m.named_parameters(), compression=topk(0.05, bits, qbs=1024),
                                    bucket_bytes=256, warmup_steps=warmup, seed=11)
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
                                model.named_parameters(),
                                compression=topk(density=0.01 * (1 + rank)))
        ok(False, "different options accepted")
    except sparcml.RankMismatchError as exc:
        ok("density" in str(exc), str(exc))
    try:  # an option only the last rank gets wrong: every rank raises its error
        st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                bucket_bytes=0 if rank == P - 1 else 64)
        ok(False, "bucket_bytes=0 accepted")
    except sparcml.IncompatibleOptionsError as exc:
        ok(f"rank {P - 1}" in str(exc) and "bucket_bytes" in str(exc), str(exc))

for kwargs, err in (({"compression": "topk"}, sparcml.IncompatibleOptionsError),
                    ({"bucket_bytes": 0}, sparcml.IncompatibleOptionsError),
                    ({"warmup_steps": -1}, sparcml.IncompatibleOptionsError),
                    ({"bits": 4, "algorithm": "dense"}, sparcml.IncompatibleOptionsError),
                    ({"algorithm": "ring"}, sparcml.UnknownAlgorithmError),
                    ({"density": 0.1, "k": 3}, sparcml.IncompatibleOptionsError),
                    ({"density": 0.0}, sparcml.IncompatibleOptionsError),
                    ({"density": 0.1, "compression": Compression()},
                     sparcml.IncompatibleOptionsError)):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), **kwargs)
        ok(False, f"{kwargs} accepted")
    except err:
        ok(True, "")

st.broadcast_parameters(model)  # the plain step above moved every rank differently
opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                              compression=topk(density=0.5))
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
opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                              compression=topk(density=0.3))
loss_of(model, *batch(2)).backward()
opt.step()
ok(identical_everywhere(flat(model)) and opt.stats.steps == 1, "after re-wrapping")
opt.remove_hooks()

# 6. the deprecated keywords: a DeprecationWarning that spells the new call, and bitwise the
# same training as that call ------------------------------------------------------------------
for old, new in (
        ({"density": 0.1, "bits": 4, "bucket_size": 200, "quantizer_bucket_size": 4},
         {"compression": topk(0.1, 4, qbs=4), "bucket_bytes": 200}),
        ({"k": 5, "topk_bucket_size": 8, "error_feedback": False,
          "algorithm": "ssar_split_allgather"},
         {"compression": Compression(TopKCompressor(k=5, chunk=8), None, NoneMemory(),
                                     "ssar_split_allgather")}),
        ({"bits": 8, "algorithm": "dsar_split_allgather"},
         {"compression": Compression(NoneCompressor(), sparcml.QSGD(8), NoneMemory(),
                                     "dsar_split_allgather")}),
        ({"algorithm": "dense"}, {"compression": Compression.none()})):
    runs = []
    for kwargs in (old, new):
        m = make_model()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            o = st.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.2, momentum=0.9),
                                        m.named_parameters(), seed=2, **kwargs)
        train(m, o, 3)
        o.remove_hooks()
        runs.append(flat(m))
        if kwargs is old:
            ok(len(caught) == 1 and caught[0].category is DeprecationWarning
               and "compression=Compression(" in str(caught[0].message)
               and caught[0].filename == __file__, [str(w.message) for w in caught])
            ok(o.compression.describe() == new["compression"].describe(),
               o.compression.describe())
        else:
            ok(not caught, [str(w.message) for w in caught])
    ok(np.array_equal(runs[0], runs[1]), f"{old}: the old keywords train differently")

total = comm.allreduce(passed())
if rank == 0:
    print(f"TORCH-ADAPTER {total // P} OK", flush=True)
