"""Record real gradients once, to replay them per rank (``sparc-bench --pattern replay``).

    sparc-record-gradients linear --count 1024 --output url-linear.npz
    sparc-record-gradients cnn --count 1024 --output cnn-topk.npz

Both record what the P ranks of one data-parallel step would each send: ``count`` minibatch
gradients at the *same* weights, on ``count`` disjoint minibatches (rank r of a replay takes
gradient ``r mod count``; see :mod:`.replay` for the file format).

- ``linear``: ``sparc-linear``'s model (logistic loss, L2 ``alpha`` as its default) on the
  url-like synthetic twin (3,231,961 features, ~116 nonzeros per row): weights after one
  epoch of single-process training on ``--train-rows`` rows, then the summed loss gradient of
  ``--batch-size`` rows per minibatch (``sparc-linear``'s default 256), intercept as the last
  coordinate -- the sparse vector its engine passes to ``sparcml.allreduce``: nonzero on the
  columns the rows touch.
- ``cnn``: ``sparc-cnn``'s 5M-parameter model (DigitsCNN width 100, 5,318,810 parameters, on
  scikit-learn's digits) after ``--warm-steps`` plain SGD steps, then per minibatch of 32 the
  flattened gradient's top ``--density`` fraction by magnitude (1%: 53,188 values) -- the
  selection of a top-k step, here without the error-feedback residual (the first step after
  a reset).
"""

from __future__ import annotations

import sys

import numpy as np

from sparcapps.cli_args import (add_deprecated_alias, density_help, fraction, make_parser,
                                nonnegative_int, output_file, positive_int)
from sparcapps.output_paths import write_with_fallback

from .replay import save_replay

__all__ = ["linear_gradients", "cnn_topk_gradients", "main"]


def linear_gradients(count: int, *, batch_size: int = 256, train_rows: int = 50_000,
                     seed: int = 1, alpha: float = 1e-4):
    """``(dim, [(indices, values)] * count, description)`` of url-like minibatch gradients."""
    from scipy.special import expit  # scipy, scikit-learn (the [apps] extra): not at --help

    from sparcapps.data import make_url_like
    from sparcapps.linear import SparseLinearClassifier

    rows = train_rows + count * batch_size
    X, y = make_url_like(rows, seed=seed)
    X = X.tocsr()
    est = SparseLinearClassifier("log", alpha=alpha, batch_size=batch_size, max_iter=1,
                                 tol=None, seed=seed)
    est.fit(X[:train_rows], y[:train_rows])
    w, b = est.coef_.ravel(), float(est.intercept_[0])
    dim = X.shape[1] + 1
    labels = np.where(y == est.classes_[1], 1.0, -1.0)
    out = []
    for j in range(count):
        lo = train_rows + j * batch_size
        Xb = X[lo:lo + batch_size]
        z = labels[lo:lo + batch_size] * (Xb @ w + b)
        d = -labels[lo:lo + batch_size] * expit(-z)  # d loss / d margin of the log loss
        g = (Xb.T @ d)  # dense over features: only the touched columns can be nonzero
        cols = np.unique(Xb.indices)
        vals = g[cols]  # the engine applies the L2 decay through a scalar, not the gradient
        idx = np.append(cols, dim - 1)
        out.append((idx, np.append(vals, d.sum()).astype(np.float32)))
    text = (f"sparc-linear logistic loss, url-like twin (seed {seed}, {X.shape[1]} features), "
            f"weights after 1 epoch on {train_rows} rows, summed gradients of {batch_size} "
            f"rows per minibatch, {count} disjoint minibatches; intercept last")
    return dim, out, text


def cnn_topk_gradients(count: int, *, width: int = 100, batch_size: int = 32,
                       topk: float = 0.01, warm_steps: int = 20, seed: int = 0):
    """``(dim, [(indices, values)] * count, description)`` of the CNN's top-k gradients."""
    import torch  # the [torch] extra: not at --help

    from sparcapps.deep.data import load_digits_split
    from sparcapps.deep.models import DigitsCNN, count_parameters

    torch.manual_seed(seed)
    X, y, _, _ = load_digits_split()
    model = DigitsCNN(width, 2)
    dim = count_parameters(model)
    k = max(1, int(round(topk * dim)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(seed)

    def grad(rows) -> torch.Tensor:
        model.zero_grad()
        out = model(torch.from_numpy(X[rows]))
        torch.nn.functional.cross_entropy(out, torch.from_numpy(y[rows])).backward()
        return torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.requires_grad])

    for _ in range(warm_steps):
        grad(rng.choice(len(y), batch_size, replace=False))
        opt.step()
    out = []
    for _ in range(count):  # minibatches drawn independently (digits has 1,437 train rows)
        g = grad(rng.choice(len(y), batch_size, replace=False)).detach()
        top = torch.topk(g.abs(), k, sorted=False).indices
        idx = top.numpy().astype(np.int64)
        out.append((idx, g[top].numpy().astype(np.float32)))
    text = (f"sparc-cnn DigitsCNN width {width} ({dim} parameters) on digits, after "
            f"{warm_steps} SGD steps (lr 0.1, batch {batch_size}, seed {seed}); top {topk:g} "
            f"({k} values) of each of {count} minibatch gradients of {batch_size}, no error "
            f"feedback")
    return dim, out, text


def main(argv=None) -> int:

    p = make_parser("sparc-record-gradients", description=__doc__)
    p.add_argument("stream", choices=["linear", "cnn"],
                   help="linear: the url-like twin, generated in memory (no data set is read, "
                        "hence no --data-home); cnn: scikit-learn's bundled digits")
    p.add_argument("--count", type=positive_int, default=1024, help="gradients to record")
    p.add_argument("--output", required=True, metavar="FILE.npz", type=output_file,
                   help="the replay file to write")
    p.add_argument("--batch-size", type=positive_int,
                   help="rows per minibatch (default: linear 256, cnn 32)")
    p.add_argument("--train-rows", type=positive_int, default=50_000,
                   help="linear: training rows")
    density = p.add_argument("--density", type=fraction, default=0.01,
                             help=density_help("cnn: what top-k (by magnitude) keeps of the "
                                               "gradient"))
    add_deprecated_alias(p, "--topk", density)
    p.add_argument("--width", type=positive_int, default=100,
                   help="cnn: DigitsCNN width (100: 5.3M parameters)")
    p.add_argument("--warm-steps", type=nonnegative_int, default=20,
                   help="cnn: SGD steps before recording")
    a = p.parse_args(argv)
    if a.stream == "linear":
        dim, vectors, text = linear_gradients(a.count, batch_size=a.batch_size or 256,
                                              train_rows=a.train_rows)
        name = "url-linear"
    else:
        dim, vectors, text = cnn_topk_gradients(a.count, width=a.width,
                                                batch_size=a.batch_size or 32, topk=a.density,
                                                warm_steps=a.warm_steps)
        name = "cnn-topk"
    written = write_with_fallback(
        a.output if a.output.endswith(".npz") else a.output + ".npz",
        lambda path: save_replay(path, name, dim, vectors, source=text),
        prog="sparc-record-gradients", what="replay file")
    nnz = [v[0].size for v in vectors]
    print(f"{written}: {name}, {len(vectors)} vectors of dimension {dim}, nnz "
          f"{min(nnz)}-{max(nnz)} (mean density {np.mean(nnz) / dim:.4%}); {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
