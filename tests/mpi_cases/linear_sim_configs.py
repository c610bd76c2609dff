"""The sparc-linear / sparc-svm configurations that tests/test_apps_simulated.py runs both
under mpiexec and on simulated ranks: (name, program, extra options)."""

CONFIGS = [
    ("log-sparse", "sparc-linear", ["--loss", "log"]),
    ("log-dense", "sparc-linear", ["--loss", "log", "--algorithm", "dense"]),
    ("hinge-sparse", "sparc-svm", ["--algorithm", "ssar_split_allgather"]),
    ("hinge-dense", "sparc-svm", ["--algorithm", "dense"]),
]


def common(d) -> list[str]:
    """Options every run shares: a small url-like twin, 2 epochs, a global batch that P = 2, 3
    and 4 divide alike (per-rank batch 12 x P = 24, 36, 48 rows: different global batches, so
    each P is its own run)."""
    return ["--synth", "url", "--rows", "1500", "--features", "6000", "--synth-cache", str(d),
            "--epochs", "2", "--batch-size", "12", "--no-progress", "--seed", "5"]
