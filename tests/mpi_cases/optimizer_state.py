"""``DistributedOptimizer.load_state_dict`` is collective: a state that does not fit on one rank
makes every rank raise the same error and keep what it had, so the next step runs on all of
them (issue 25, item 4). Run WITHOUT ``-m mpi4py`` (a rank raising alone would leave the
others hanging: the test's timeout catches that). Rank 0 prints ``OPTIMIZER-STATE OK``.
"""

import copy
import sys

import torch
from mpi4py import MPI

import sparcml
import sparcml.torch as st
from sparcml.compression import Compression, TopKCompressor

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
torch.manual_seed(0)


def build(seed=11):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9),
                                  model.named_parameters(), seed=seed, bucket_bytes=256,
                                  compression=Compression(TopKCompressor(density=0.1)))
    return model, opt


def train(model, opt, steps, start=0):
    for s in range(start, start + steps):
        g = torch.Generator().manual_seed(100 * s + rank)
        x, y = torch.randn(8, 8, generator=g), torch.randint(0, 3, (8,), generator=g)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def expect_refused(opt, state, words, label):
    before = copy.deepcopy(opt.state_dict())
    try:
        opt.load_state_dict(state)
    except sparcml.SparcmlError as exc:
        for w in words:
            assert w in str(exc), f"{label}: {exc}"
    else:
        raise AssertionError(f"{label}: accepted on rank {rank}")
    after = opt.state_dict()  # what this rank had, restored
    assert after["sparcml"]["step"] == before["sparcml"]["step"], label
    assert torch.equal(after["state"][0]["momentum_buffer"],
                       before["state"][0]["momentum_buffer"]), label


model, opt = build()
train(model, opt, 3)
saved = copy.deepcopy(opt.state_dict())
# every rank loads rank 0's file (a common mistake): rank 0's own load fits, yet it raises too
if P > 1:
    rank0 = comm.bcast(saved if rank == 0 else None, root=0)
    expect_refused(opt, rank0, ["rank 0 of", "give each rank its own state"], "rank 0's state")
# one rank's state with other options
other = copy.deepcopy(saved)
if rank == P - 1:
    other["sparcml"]["config"]["seed"] = 99
expect_refused(opt, other, ["use the same options"], "other options on the last rank")
# one rank's state of another step
if P > 1:
    later = copy.deepcopy(saved)
    if rank == 1:
        later["sparcml"]["step"] = 5
    expect_refused(opt, later, ["states of different steps", "step 5: rank 1"], "steps")
# a good load still works, and training goes on in step on every rank
opt.load_state_dict(saved)
train(model, opt, 2, start=3)
mine = flat(model).tobytes()
assert all(x == mine for x in comm.allgather(mine)), "parameters differ across ranks"
if rank == 0:
    print("OPTIMIZER-STATE OK", flush=True)
sys.exit(0)
