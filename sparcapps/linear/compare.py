"""Accuracy against scikit-learn's ``SGDClassifier`` on the same split, same loss and epochs.

Run under MPI (every rank trains its shard; rank 0 also fits ``SGDClassifier`` on the whole
training split, in one process)::

    mpiexec -n 4 python -m sparcapps.linear.compare --synth url --alpha 1e-3 --batch-size 32
    python -m sparcapps.linear.compare --breast-cancer          # sklearn's data, as LIBSVM

``--breast-cancer`` writes scikit-learn's breast cancer data (standardized: SGD needs scaled
features) as LIBSVM text, converts it with :func:`sparcapps.data.convert_libsvm` and compares
over ``--repeats`` seeds (the mean accuracy: 121 test rows make one seed's figure coarse).
"""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
from mpi4py import MPI

import sparcml
from sparcapps.cli_args import add_data_home_argument, add_list_argument, make_parser, positive_int
from sparcapps.data import data_home

from .data import ensure_synth, load_split

__all__ = ["breast_cancer_h5", "sklearn_accuracy", "compare", "main"]

_SKLEARN_LOSS = {"log": "log_loss", "hinge": "hinge"}


def breast_cancer_h5(directory) -> Path:
    """scikit-learn's breast cancer data, standardized, written as LIBSVM and converted to a
    sparcml-csr file in ``directory`` (labels: malignant -1, benign +1). Returns its path."""
    # scikit-learn, and h5py to write the file (the [apps] extra): not at --help
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    from sparcapps.data import convert_libsvm, write_libsvm

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    directory = Path(directory)
    svm = write_libsvm(directory / "breast_cancer.svm", X, np.where(y == 1, 1.0, -1.0),
                       overwrite=True)
    out = directory / "breast_cancer.h5"
    convert_libsvm(svm, out, task="binary", overwrite=True)
    return out


def sklearn_accuracy(Xtr, ytr, Xte, yte, *, loss: str, alpha: float, epochs: int,
                     seed: int) -> float:
    """Test accuracy of ``SGDClassifier`` (``max_iter=epochs, tol=None``) on CSR data."""
    from sklearn.linear_model import SGDClassifier  # the [apps] extra: not at --help

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ConvergenceWarning of max_iter with tol=None
        clf = SGDClassifier(loss=_SKLEARN_LOSS[loss], alpha=alpha, max_iter=epochs, tol=None,
                            random_state=seed).fit(Xtr, ytr)
    return float(clf.score(Xte, yte))


def compare(path, comm, *, loss: str, alpha: float, epochs: int, batch_size: int,
            seeds=(0,), test_fraction: float = 0.2, split_seed: int = 0,
            algorithm: str | None = None) -> dict:
    """Collective: mean test accuracy over ``seeds`` of ours (data-parallel on ``comm``) and
    of ``SGDClassifier`` (rank 0 alone, whole split; other ranks get None for it)."""
    # scipy, h5py, scikit-learn (the [apps] extra): not at --help
    from sparcapps.data import load_shard

    from .estimator import SparseLinearClassifier

    algorithm = sparcml.DEFAULT_ALGORITHM if algorithm is None else algorithm

    Xtr, ytr, Xte, yte = load_split(path, comm, test_fraction=test_fraction,
                                    split_seed=split_seed)
    ours, theirs = [], []
    for seed in seeds:
        clf = SparseLinearClassifier(loss, alpha=alpha, max_iter=epochs, tol=None,
                                     batch_size=batch_size,
                                     seed=seed, comm=comm, algorithm=algorithm).fit(Xtr, ytr)
        pred_ok = np.count_nonzero(clf.predict(Xte) == yte)
        total = comm.allreduce(np.array([pred_ok, Xte.shape[0]], np.int64))
        ours.append(total[0] / total[1])
    if comm.Get_rank() == 0:
        Xa, ya = load_shard(path, split="train", test_fraction=test_fraction, seed=split_seed)
        Xb, yb = load_shard(path, split="test", test_fraction=test_fraction, seed=split_seed)
        theirs = [sklearn_accuracy(Xa, ya, Xb, yb, loss=loss, alpha=alpha, epochs=epochs,
                                   seed=seed) for seed in seeds]
    comm.Barrier()
    return {"ours": float(np.mean(ours)), "ours_each": ours,
            "sklearn": float(np.mean(theirs)) if theirs else None, "sklearn_each": theirs}


def main(argv=None) -> int:
    p = make_parser("sparc-linear-compare", __doc__.split("\n\n")[0])
    one = p.add_mutually_exclusive_group(required=True)
    one.add_argument("--data", metavar="FILE.h5", help="sparcml-csr file")
    one.add_argument("--synth", choices=["url", "webspam"], help="a synthetic twin")
    one.add_argument("--breast-cancer", action="store_true",
                     help="scikit-learn's breast cancer data, standardized")
    p.add_argument("--rows", type=positive_int, default=130_000,
                   help="rows of the --synth data set (20%% held out: ~104,000 train)")
    p.add_argument("--features", type=positive_int,
                   help="override the --synth feature count (default: the real data set's)")
    p.add_argument("--synth-cache", metavar="DIR",
                   help="where --synth files are kept (default: DATA_HOME/synth)")
    add_data_home_argument(p)
    add_list_argument(p, "--losses", choices=("log", "hinge"), default=["log", "hinge"],
                      metavar="LOSS", help="log, hinge or both")
    p.add_argument("--alpha", type=float, default=1e-3, help="L2 regularization strength")
    p.add_argument("--epochs", type=positive_int, default=5, help="passes over the data")
    p.add_argument("--batch-size", type=positive_int, default=256, help="rows per rank per step")
    p.add_argument("--repeats", type=positive_int, default=1, help="seeds to average over")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    with sparcml.abort_on_error():
        tmp = None
        if args.breast_cancer:
            tmp = tempfile.mkdtemp(prefix="sparc-bc-") if comm.Get_rank() == 0 else None
            tmp = comm.bcast(tmp)
            path = breast_cancer_h5(tmp) if comm.Get_rank() == 0 else None
            path = comm.bcast(path)
        elif args.synth:
            path = ensure_synth(args.synth, args.rows, 0, args.features,
                                args.synth_cache or data_home(args.data_home) / "synth", comm)
        else:
            path = args.data
        for loss in args.losses:
            r = compare(path, comm, loss=loss, alpha=args.alpha, epochs=args.epochs,
                        batch_size=args.batch_size, seeds=range(args.repeats))
            if comm.Get_rank() == 0:
                print(f"{loss:>5}: sparc-linear P={comm.Get_size()} "
                      f"{100 * r['ours']:.2f}%  SGDClassifier {100 * r['sklearn']:.2f}%  "
                      f"difference {100 * (r['ours'] - r['sklearn']):+.2f} points "
                      f"(alpha={args.alpha}, epochs={args.epochs}, "
                      f"global batch={args.batch_size * comm.Get_size()}, "
                      f"mean of {args.repeats} seed(s))", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
