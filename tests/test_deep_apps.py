"""sparc-cnn / sparc-lstm (imports torch): data readers on tiny files in the real on-disk formats,
and one 2-rank job running both apps end to end (digits, checkpoint + bitwise resume, CIFAR-10
binary, Penn Treebank)."""

import io
import json
import re
import sys
import tarfile

import numpy as np
import pytest

from mpirun import REPO, run_mpi

pytest.importorskip("torch")

from sparcapps.deep import data  # noqa: E402

CIFAR_FILES = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]


def cifar_bytes(n, seed):
    rng = np.random.default_rng(seed)
    rec = rng.integers(0, 256, (n, data.CIFAR_RECORD_BYTES), dtype=np.uint8)
    rec[:, 0] = rng.integers(0, 10, n)
    return rec


def write_cifar(root, n=20, archive=False):
    root.mkdir(parents=True, exist_ok=True)
    blobs = {name: cifar_bytes(n, i).tobytes() for i, name in enumerate(CIFAR_FILES)}
    if archive:
        with tarfile.open(root / "cifar-10-binary.tar.gz", "w:gz") as tar:
            for name, blob in blobs.items():
                info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
                info.size = len(blob)
                tar.addfile(info, io.BytesIO(blob))
    else:
        (root / "cifar-10-batches-bin").mkdir()
        for name, blob in blobs.items():
            (root / "cifar-10-batches-bin" / name).write_bytes(blob)
    return blobs


def write_ptb(root, seed=0):
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(30)] + ["<unk>", "N"]
    for split, lines in (("train", 60), ("valid", 20), ("test", 40)):
        text = "\n".join(" " + " ".join(rng.choice(words, rng.integers(3, 12))) + " "
                         for _ in range(lines))
        (root / f"ptb.{split}.txt").write_text(text + "\n")


def test_cifar10_binary_layout_from_directory_and_archive(tmp_path):
    blobs = write_cifar(tmp_path / "dir")
    write_cifar(tmp_path / "tar", archive=True)
    a = data.load_cifar10(tmp_path / "dir")
    b = data.load_cifar10(tmp_path / "tar")
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    Xtr, ytr, Xte, yte = a
    assert Xtr.shape == (100, 3, 32, 32) and Xte.shape == (20, 3, 32, 32)
    assert Xtr.dtype == np.float32 and ytr.dtype == np.int64
    raw = np.frombuffer(blobs["data_batch_2.bin"], np.uint8).reshape(20, -1)
    # record 3 of batch 2: label byte, then red plane row-major, green, blue
    assert ytr[20 + 3] == raw[3, 0]
    c, r, col = 2, 5, 7
    pixel = raw[3, 1 + c * 1024 + r * 32 + col] / 255.0
    want = (pixel - data.CIFAR_MEAN[c]) / data.CIFAR_STD[c]
    assert np.isclose(Xtr[23, c, r, col], want, rtol=1e-6)
    bad = tmp_path / "bad" / "cifar-10-batches-bin"
    bad.mkdir(parents=True)
    for name in CIFAR_FILES:
        (bad / name).write_bytes(b"\0" * 3000)
    with pytest.raises(data.DeepDataError, match="whole number of CIFAR-10 records"):
        data.load_cifar10(tmp_path / "bad")
    with pytest.raises(data.DeepDataError, match="sparc-data fetch cifar10"):
        data.load_cifar10(tmp_path / "nothing")


def test_ptb_reader_and_lm_batches(tmp_path):
    (tmp_path / "ptb.train.txt").write_text(" a b a \n c a \n")
    (tmp_path / "ptb.valid.txt").write_text(" a z \n")
    (tmp_path / "ptb.test.txt").write_text(" b \n")
    corpus = data.load_ptb(tmp_path)
    assert corpus.vocab[:2] == ["a", "<eos>"] and "<unk>" in corpus.vocab
    words = [corpus.vocab[i] for i in corpus.train]
    assert words == ["a", "b", "a", "<eos>", "c", "a", "<eos>"]
    assert [corpus.vocab[i] for i in corpus.valid] == ["a", "<unk>", "<eos>"]
    tokens = np.arange(100)
    xs, ys = data.lm_batches(tokens, 1, 2, batch_size=5, bptt=3)
    assert len(xs) == 3 and xs[0].shape == (3, 5)
    assert xs[0][0, 0] == 50 and np.array_equal(ys[0], xs[0] + 1)
    with pytest.raises(data.DeepDataError, match="ptb"):
        data.load_ptb(tmp_path / "none")


def test_shards_are_disjoint_and_equal():
    parts = [data.shard_permutation(103, r, 3, seed=1, epoch=2, batch_size=8) for r in range(3)]
    assert all(len(p) == 4 for p in parts)
    seen = np.concatenate([np.concatenate(p) for p in parts])
    assert len(np.unique(seen)) == len(seen)
    again = data.shard_permutation(103, 0, 3, seed=1, epoch=2, batch_size=8)
    assert all(np.array_equal(a, b) for a, b in zip(parts[0], again))


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.mpi
def test_apps_end_to_end_on_two_ranks(tmp_path):
    write_cifar(tmp_path / "cifar10", archive=True)
    write_ptb(tmp_path / "ptb")
    proc = run_mpi(2, args=[sys.executable, "-m", "mpi4py",
                            str(REPO / "tests" / "mpi_cases" / "deep_apps.py"), str(tmp_path)],
                   timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert "DEEP-APPS OK" in proc.stdout, proc.stdout + proc.stderr
    assert "--bits needs a sparse algorithm" in proc.stderr
    # user errors: one line on rank 0, no traceback, no abort (defect 9 of issue 15)
    assert "Traceback" not in proc.stderr and "MPI_Abort" not in proc.stderr, proc.stderr
    missing = [line for line in proc.stderr.splitlines() if "CIFAR-10 not found" in line]
    assert len(missing) == 2, proc.stderr
    assert missing[0].startswith("sparc-cnn: error: ") and missing[0].endswith("(ranks 0, 1)")
    assert missing[1].endswith("(rank 1)")
    assert proc.stdout.count("is a finished run (1 epochs, --epochs 1); nothing to train") == 1
    (first,), (resumed,), (straight,) = (read(tmp_path / f"{n}.jsonl")
                                         for n in ("first", "resumed", "straight"))
    assert resumed["metrics"]["params_sha256"] == straight["metrics"]["params_sha256"]
    assert first["metrics"]["params_sha256"] != straight["metrics"]["params_sha256"]
    assert [e["epoch"] for e in resumed["metrics"]["epochs"]] == [1, 2, 3]
    assert resumed["metrics"]["epochs"][0] == first["metrics"]["epochs"][0]
    for rec in [straight, *read(tmp_path / "lstm.jsonl"), *read(tmp_path / "cifar.jsonl")]:
        assert rec["status"] == "ok" and rec["P"] == 2
        assert rec["metrics"]["params_identical_across_ranks"]
        last = rec["metrics"]["epochs"][-1]
        for key in ("loss", "test_accuracy", "wall_seconds", "compute_seconds", "comm_seconds",
                    "bytes_per_step", "sent_density", "result_density"):
            assert key in last, key
        assert 0 <= last["test_accuracy"] <= 1
    assert abs(straight["metrics"]["epochs"][-1]["sent_density"] - 0.05) < 0.01
    (dense,) = read(tmp_path / "dense.jsonl")
    assert dense["algorithm"] == "dense" and dense["metrics"]["epochs"][0]["sent_density"] == 1
    assert dense["bytes"]["sent_per_step"] == dense["bytes"]["dense_per_step"]
    assert straight["bytes"]["ratio_dense_over_sent"] > 5
    (glob,) = read(tmp_path / "global.jsonl")  # --global-topk: k of the sum, not the union
    assert glob["config"]["global_topk"] and glob["metrics"]["params_identical_across_ranks"]
    assert glob["metrics"]["epochs"][0]["result_density"] <= 0.051
    assert straight["metrics"]["epochs"][0]["result_density"] > 0.06
    (cifar,) = read(tmp_path / "cifar.jsonl")
    assert cifar["config"]["dataset"] == "cifar10" and cifar["metrics"]["model"] == "ResNetCifar"
    (ptb,) = read(tmp_path / "ptb.jsonl")
    assert ptb["metrics"]["model"] == "WordLM" and ptb["metrics"]["test_perplexity"] > 1
    assert len(ptb["metrics"]["epochs"]) == 2


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_compressor_state_resumes_bitwise_under_mpiexec(tmp_path, nprocs):
    """sparc-cnn with DGC (inside its warm-up), PowerSGD and random-k: checkpoint after epoch
    1, resume to epoch 2, the same parameters bit for bit as the uninterrupted run
    (tests/mpi_cases/compressor_resume.py)."""
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py",
                                 str(REPO / "tests" / "mpi_cases" / "compressor_resume.py"),
                                 str(tmp_path)], timeout=400, env={"OMP_NUM_THREADS": "1"})
    found = re.search(r"COMPRESSOR-RESUME (\d+) OK", proc.stdout)
    assert found and int(found.group(1)) == 3, proc.stdout + proc.stderr
