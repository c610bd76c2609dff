"""Each named compressor against a plain NumPy reference of its paper's update, at P = 1 (the
compressor's local step: no MPI job), torch-free and cheap:

- one parametrized test: three steps of every name of ``sparcml.compression.COMPRESSORS``
  (as ``build`` makes it, on a bucket of three tensors with exact zeros in it) against the
  reference written here from the paper (per-tensor selection and scales, DGC's momentum
  correction, masking, clipping and warm-up, EF-signSGD's ``|p|_1 / d sign(p)`` with
  ``sign(0) = 0``, TernGrad's 2.5-sigma clipping and per-layer scaler, random-k's ``n / k``
  without memory, ...);
- DGC's local clipping threshold scaled by ``P**-1/2`` and its dense warm-up step (momentum
  SGD, not plain SGD); QSGD's default L2 norm;
- random-k without memory unbiased (the mean of many seeded draws), random-k with memory
  converging on a tiny least-squares problem;
- the deep apps' ``--help`` naming only flags their parser has, and the compressors'
  recommended hyperparameters reaching ``--lr`` / ``--momentum`` unless given.
"""

import math
import re
import struct
import zlib

import numpy as np
import pytest
from mpi4py import MPI

from sparcml._runtime.context import context_for
from sparcml.compression import COMPRESSORS, DGCMemory, build, get_compressor
from test_compressors import reference_powersgd_per_tensor

SHAPES = [(6, 8), (6,), (4, 5)]
SIZES = [int(np.prod(s)) for s in SHAPES]
N = sum(SIZES)
OFFSETS = np.cumsum([0] + SIZES)
DENSITY, THRESHOLD, RANK, CLIP, WARMUP = 0.1, 0.8, 2, 3.0, 2


def inputs(steps=3):
    rng = np.random.default_rng(21)
    out = []
    for _ in range(steps):
        x = rng.standard_normal(N).astype(np.float32)
        x[rng.random(N) < 0.3] = 0.0  # a third exactly 0, as in a small CNN's batch gradient
        x[OFFSETS[1]:OFFSETS[2]] *= 0.01  # a tensor of small gradients (a bias)
        out.append(x)
    return out


def tensors(x):
    return [x[a:b] for a, b in zip(OFFSETS, OFFSETS[1:])]


def kept(d, length):
    """Entries a top-``d`` fraction keeps of ``length`` (at least 1, half rounded up)."""
    return min(length, max(1, math.floor(d * length + 0.5)))


def top(v, k):
    """Indices of the k largest |v|, ties to the lower index, sorted."""
    return np.sort(np.argsort(-np.abs(v), kind="stable")[:k])


def key_seed(key):
    return zlib.crc32(repr(key).encode())


# -- the references (one function per compressor: the inputs -> each step's result) ------------

def ref_topk(xs, per_tensor=False):
    e, out = np.zeros(N), []
    for x in xs:
        g = x + e
        if per_tensor:
            idx = np.concatenate([a + top(t, kept(DENSITY, t.size))
                                  for a, t in zip(OFFSETS, tensors(g))])
        else:
            idx = top(g, kept(DENSITY, N))
        sent = np.zeros(N)
        sent[idx] = g[idx]
        e = g - sent                                         # error feedback
        out.append(sent)
    return out


def ref_randomk(xs, memory=True):
    """Stich et al. 2018 (memory: the rest stays) / Wangni et al. 2018 (no memory: n / k)."""
    e, out, k = np.zeros(N), [], kept(DENSITY, N)
    for step, x in enumerate(xs):
        g = x + e
        idx = np.random.default_rng([0, key_seed(0), step, 1]).choice(N, k, replace=False)
        sent = np.zeros(N)
        sent[idx] = g[idx] if memory else g[idx] * N / k
        e = g - sent if memory else e
        out.append(sent)
    return out


def ref_threshold(xs):
    e, out = np.zeros(N), []
    for x in xs:
        g = x + e
        sent = np.where(np.abs(g) >= THRESHOLD, g, 0.0)
        e = g - sent
        out.append(sent)
    return out


def ref_dgc(xs, m=0.9, clip=None, warmup=0):
    """Lin et al. 2018: clip, u = m u + g, v = v + u, top density of each tensor of |v|, send,
    v and u masked where sent; density 25% -> DENSITY exponentially in 4 stages over
    ``warmup`` steps."""
    u, v, out = np.zeros(N), np.zeros(N), []
    for step, x in enumerate(xs):
        g = x.astype(np.float64)
        if clip is not None and np.linalg.norm(g) > clip:
            g = g * clip / np.linalg.norm(g)
        u = m * u + g
        v = v + u
        d = DENSITY if step >= warmup else \
            0.25 * (DENSITY / 0.25) ** ((step * 4 // warmup) / 4)
        idx = np.concatenate([a + top(t, kept(d, t.size)) for a, t in zip(OFFSETS, tensors(v))])
        sent = np.zeros(N)
        sent[idx] = v[idx]
        v[idx] = 0
        u[idx] = 0
        out.append(sent)
    return out


def ref_signsgd(xs):
    """Bernstein et al. 2018 at one worker: the vote is sign(g), sign(0) = 0."""
    return [np.sign(x) for x in xs]


def ref_signum(xs, beta=0.9):
    m, out = np.zeros(N), []
    for x in xs:
        m = beta * m + (1 - beta) * x
        out.append(np.sign(m))
    return out


def ref_efsignsgd(xs):
    """Karimireddy et al. 2019, Algorithm 1: p = g + e, delta = (|p|_1 / d) sign(p) per
    tensor, e = p - delta."""
    e, out = np.zeros(N), []
    for x in xs:
        p = x + e
        delta = np.concatenate([np.abs(t).mean() * np.sign(t) for t in tensors(p)])
        e = p - delta
        out.append(delta)
    return out


def ref_terngrad(xs, c=2.5, memory=True):
    """Wen et al. 2017: per layer, clip to c sigma, s = max |g|, s sign(g) Bernoulli(|g| / s)
    (the draws: the compressor's seeded stream, one uniform per value)."""
    e, out = np.zeros(N), []
    for step, x in enumerate(xs):
        g = x + e
        u = np.random.default_rng([0, key_seed(0), step, 1]).random(N)
        sent = np.zeros(N)
        for a, b in zip(OFFSETS, OFFSETS[1:]):
            t = g[a:b].astype(np.float32).astype(np.float64)
            t = np.clip(t, -c * t.std(), c * t.std())
            s = np.abs(t).max()
            sent[a:b] = np.float32(s) * np.sign(t) * (u[a:b] < np.abs(t) / s)
        e = g - sent if memory else e
        out.append(sent)
    return out


def ref_cast(xs, fmt):
    def rnd(v):
        v = v.astype(np.float32)
        if fmt == "fp16":
            return v.astype(np.float16).astype(np.float64)
        u = v.view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        return u.astype(np.uint32).view(np.float32).astype(np.float64)

    e, out = np.zeros(N), []
    for x in xs:
        g = (x + e).astype(np.float32)
        sent = rnd(g)
        e = g - sent
        out.append(sent)
    return out


def ref_powersgd(xs, r=RANK, seed=0):
    """Vogels et al. 2019 per matrix (>= 2 dims), one power iteration, warm start, error
    feedback; the other tensors whole (test_compressors' NumPy reference)."""
    return [sent for sent, _ in reference_powersgd_per_tensor(xs, SHAPES, r, seed)]


REFERENCES = {
    "topk": (ref_topk, {}),
    "topk-per-tensor": (lambda xs: ref_topk(xs, per_tensor=True), {"per_tensor": True}),
    "global-topk": (ref_topk, {}),  # at P = 1 the sum's top-k is the local one
    "randomk": (ref_randomk, {}),
    "randomk-no-memory": (lambda xs: ref_randomk(xs, memory=False), {"error_feedback": False}),
    "threshold": (ref_threshold, {}),
    "dgc": (lambda xs: ref_dgc(xs, clip=CLIP, warmup=WARMUP), {}),
    "qsgd": (lambda xs: [x.astype(np.float64) for x in xs], {}),  # P = 1: nothing travels
    "terngrad": (ref_terngrad, {}),
    "signsgd": (ref_signsgd, {}),
    "signum": (ref_signum, {}),
    "efsignsgd": (ref_efsignsgd, {}),
    "fp16": (lambda xs: ref_cast(xs, "fp16"), {}),
    "bf16": (lambda xs: ref_cast(xs, "bf16"), {}),
    "powersgd": (ref_powersgd, {}),
}


def test_every_compressor_has_a_reference():
    assert {case.split("-no-")[0].removesuffix("-per-tensor") for case in REFERENCES} \
        == set(COMPRESSORS)


@pytest.mark.parametrize("case", list(REFERENCES))
def test_one_step_against_the_papers_numpy_reference(case):
    """Three steps at P = 1 (the states: memory, momentum, warm-up, warm start) against the
    reference; QSGD at P = 1 sends its input unquantized (nothing travels): its L2 levels are
    checked by test_qsgd_defaults_to_the_papers_l2_norm."""
    ref, extra = REFERENCES[case]
    name = case.split("-no-")[0].removesuffix("-per-tensor")
    c = build(name, density=DENSITY, threshold=THRESHOLD, rank=RANK, clip_norm=CLIP,
              density_warmup_steps=WARMUP, **extra).fresh(seed=0)
    ctx = context_for(MPI.COMM_SELF)
    xs = inputs()
    want = ref(xs)
    for step, (x, w) in enumerate(zip(xs, want)):
        got = c.allreduce_in(ctx, x, key=0, shapes=SHAPES).result.to_dense().astype(np.float64)
        assert np.flatnonzero(got).tolist() == np.flatnonzero(w).tolist(), (case, step)
        assert np.allclose(got, w, rtol=2e-6, atol=1e-6), (case, step)


def test_dgc_clips_at_the_global_threshold_times_p_to_the_minus_one_half():
    class Ctx:
        size = 4

    memory = DGCMemory(0.9, clip_norm=2.0)
    assert memory.clip_threshold(4) == 1.0 and memory.clip_threshold(1) == 2.0
    x = np.full(16, 1.0)  # norm 4: clipped to 2 / sqrt(4) = 1 at P = 4
    g = memory.compensate_in(Ctx(), x, key=0)
    assert np.linalg.norm(g) == pytest.approx(1.0)
    # a dense warm-up step is a momentum SGD step (u = m u + g sent whole, nothing masked)
    first = memory.full_input(Ctx(), x, key=1)
    second = memory.full_input(Ctx(), x, key=1)
    assert np.allclose(second, first * 1.9) and np.allclose(memory.velocity(1), second)
    # through the bundle, as DistributedOptimizer's --warmup-steps send it (full=True)
    c = build("dgc", density=0.1).fresh(seed=0)
    ctx = context_for(MPI.COMM_SELF)
    steps = [c.allreduce_in(ctx, x, key=0, full=True).result.to_dense() for x in (x, x, x)]
    assert np.allclose(steps[2], x * (1 + 0.9 + 0.81)), "momentum SGD, not plain SGD"


def test_dgc_warmup_is_the_papers_schedule():
    from sparcml.compression import DGCCompressor

    comp = DGCCompressor(0.001, warmup_steps=400)  # 4 "epochs" of 100 steps
    densities = [comp.density_at(s) for s in (0, 99, 100, 200, 300, 399, 400)]
    # x (0.001 / 0.25) ** (1 / 4) = x 0.2515 per epoch: the paper's x 1/4 up to its rounding
    assert np.allclose(densities, [0.25, 0.25, 0.0625, 0.015625, 0.00390625, 0.00390625,
                                   0.001], rtol=0.03), "75%, 93.75%, 98.4%, 99.6%, 99.9% sparse"


def test_qsgd_defaults_to_the_papers_l2_norm():
    c = build("qsgd", bits=4)
    assert c.quantizer.norm == "l2" and build("qsgd", bits=4, norm="max").quantizer.norm == "max"
    x = np.random.default_rng(3).standard_normal(1024)
    q = c.quantizer.quantize(x, seed=1)
    levels = np.abs(q) / np.linalg.norm(x) * 7  # 4 bits: s = 7 levels of the L2 norm
    assert np.allclose(levels, np.round(levels), atol=1e-4), "multiples of |x|_2 / 7"
    assert np.array_equal(np.sign(q[q != 0]), np.sign(x[q != 0]))


def test_randomk_without_memory_is_unbiased():
    """The mean of 4,000 seeded draws of the rescaled 5% is the input (variance (n/k - 1)
    x^2 per draw: the mean's error is within 5 of its standard deviations)."""
    x = np.random.default_rng(4).standard_normal(200)
    ctx = context_for(MPI.COMM_SELF)
    c = build("randomk", density=0.05, error_feedback=False).fresh(seed=0)
    draws = 4000
    total = np.zeros_like(x)
    for _ in range(draws):  # each call is a new step: a new draw
        total += c.allreduce_in(ctx, x, key=0).result.to_dense()
    mean = total / draws
    sd = np.abs(x) * math.sqrt(200 / 10 - 1) / math.sqrt(draws)
    assert np.all(np.abs(mean - x) <= 5 * sd + 1e-12)
    unscaled = x * 10 / 200  # the bias the rescaling removes: k / n of the input
    assert np.abs(mean - x).mean() < 0.2 * np.abs(unscaled - x).mean()


def test_randomk_with_memory_converges_without_divergence():
    """Least squares on 32 unknowns, random-k 5% with error feedback: with plain SGD (its
    recommended momentum 0, what the apps now run) the loss falls by 10^6 and never grows;
    with an outer SGD momentum 0.9 on top (what the apps used to add) the same run diverges:
    the memory's delayed sums and the momentum compound."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal((256, 32)) / math.sqrt(256)
    b = A @ rng.standard_normal(32)
    ctx = context_for(MPI.COMM_SELF)
    assert get_compressor("randomk").recommended["momentum"] == 0.0

    def losses(momentum):
        c = build("randomk", density=0.05).fresh(seed=0)
        w, buf = np.zeros(32), np.zeros(32)
        out = [0.5 * np.sum((A @ w - b) ** 2)]
        for _ in range(1500):
            buf = momentum * buf + c.allreduce_in(ctx, A.T @ (A @ w - b), key=0).result\
                .to_dense()
            w -= 0.05 * buf
            out.append(0.5 * np.sum((A @ w - b) ** 2))
        return out

    plain = losses(0.0)
    assert max(plain) <= plain[0] and plain[-1] < plain[0] * 1e-6, plain[::150]
    heavy = losses(0.9)
    assert heavy[-1] > heavy[0] * 1e3, "the contrast: outer momentum 0.9 diverges"


# -- the apps' flags -------------------------------------------------------------------------

def _help_and_parser(app):
    import importlib

    module = importlib.import_module(f"sparcapps.deep.{app}")
    parser = module.build_parser()
    return parser.format_help(), parser


@pytest.mark.parametrize("app", ["cnn", "lstm"])
def test_help_names_only_flags_that_exist(app):
    text, parser = _help_and_parser(app)
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    assert "--compressor-momentum" in named, "DGC's and signum's summaries name it"
    missing = sorted(flag for flag in named if flag not in parser._option_string_actions)
    assert not missing, f"sparc-{app} --help names flags its parser lacks: {missing}"


def test_the_apps_use_each_compressors_recommended_lr_and_momentum():
    from sparcapps.deep import cnn, lstm

    for module, lr in ((cnn, 0.1), (lstm, 0.3)):
        parse = module.build_parser().parse_args
        assert (parse([]).lr, parse([]).momentum) == (lr, 0.9), "top-k: the dense SGD"
        for name in COMPRESSORS:
            rec = get_compressor(name).recommended
            args = parse(["--compressor", name])
            assert args.lr == pytest.approx(lr * rec.get("lr_scale", 1.0)), name
            assert args.momentum == rec.get("momentum", 0.9), name
            given = parse(["--compressor", name, "--lr", "0.05", "--momentum", "0.5"])
            assert (given.lr, given.momentum) == (0.05, 0.5), f"{name}: given values win"
        assert parse(["--compressor", "efsignsgd", "--dense"]).lr == lr, "--dense: dense's"
        with pytest.raises(SystemExit):  # argparse: one line, exit 2
            parse(["--momentum", "1.5"])
    args = cnn.build_parser().parse_args
    assert args(["--compressor", "dgc"]).momentum == 0.0
    assert args(["--compressor", "signsgd"]).momentum == 0.0
    assert args(["--compressor", "randomk"]).momentum == 0.0
    assert args(["--compressor", "efsignsgd"]).lr == pytest.approx(1.0)


def test_dgc_defaults_resolved_from_the_run_and_signum_refuses_a_dense_warmup():
    from sparcapps.deep import cnn, lstm
    from sparcapps.deep.comm_options import resolve_compressor_defaults
    from sparcapps.deep.train import _check_args

    args = lstm.build_parser().parse_args(["--compressor", "dgc"])
    resolve_compressor_defaults(args, steps_per_epoch=25, clip=0.25)
    assert (args.density_warmup_steps, args.clip_norm) == (100, 0.25), "4 epochs, --clip"
    args = cnn.build_parser().parse_args(["--compressor", "dgc", "--density-warmup-steps", "0"])
    resolve_compressor_defaults(args, steps_per_epoch=25, clip=None)
    assert (args.density_warmup_steps, args.clip_norm) == (0, None), "given: kept"
    parse = cnn.build_parser().parse_args
    assert _check_args(parse(["--compressor", "dgc", "--warmup-steps", "5"])) == []
    (problem,) = _check_args(parse(["--compressor", "signum", "--warmup-steps", "5"]))
    assert "--warmup-steps" in problem and "signum" in problem


def test_qsgd_keeps_no_error_memory_unless_asked():
    """The QSGD paper has no error feedback, and at 4 bits its L2 scale is no contraction (a
    carried residual grows: the 20-epoch table's runs diverged): ``qsgd`` builds without a
    memory by default, with one when asked; the other compressors keep theirs."""
    from sparcml.compression import NoneMemory, ResidualMemory

    assert isinstance(build("qsgd", bits=4).memory, NoneMemory)
    assert isinstance(build("qsgd", bits=4, error_feedback=True).memory, ResidualMemory)
    assert isinstance(build("topk", density=0.01).memory, ResidualMemory)
    assert isinstance(build("topk", density=0.01, error_feedback=False).memory, NoneMemory)


def test_error_feedback_flags_record_what_the_user_asked():
    """Neither flag: ``error_feedback`` None in the run's config (the compressor's own default,
    which the report does not call "no error feedback"); ``--error-feedback``: True."""
    from sparcapps.deep.cnn import build_parser
    from sparcapps.deep.comm_options import error_feedback_of
    from sparcapps.report.fmt import config_label

    parser = build_parser()
    plain = parser.parse_args(["--compressor", "qsgd"])
    assert plain.error_feedback is None and error_feedback_of(plain) is None
    assert "no error feedback" not in config_label(
        {"config": vars(plain), "algorithm": "ssar_recursive_double", "density": 1.0})
    assert error_feedback_of(parser.parse_args(["--compressor", "qsgd", "--error-feedback"]))
    assert error_feedback_of(parser.parse_args(["--no-error-feedback"])) is False
