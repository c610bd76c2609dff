"""sparcml.torch with PyTorch's and Horovod's habits, and the DDP communication hook (imports
torch): one mpiexec job per process count for ``tests/mpi_cases/torch_ecosystem.py`` (what it
checks is listed there), the README's DDP example run as written under ``mpiexec -n 2``, and
the host-staging decisions of the device path on CPU (``scripts/gpu-check.sh`` runs the CUDA
path itself where a GPU is).
"""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from mpirun import REPO, run_mpi

torch = pytest.importorskip("torch")

CASE = REPO / "tests" / "mpi_cases" / "torch_ecosystem.py"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_optimizer_habits_and_ddp_hook(nprocs):
    proc = run_mpi(nprocs, args=[sys.executable, "-m", "mpi4py", str(CASE)], timeout=300,
                   env={"OMP_NUM_THREADS": "1"})
    found = re.search(r"TORCH-ECOSYSTEM (\d+) OK", proc.stdout)
    assert found and int(found.group(1)) >= 113 + 3 * 9, proc.stdout + proc.stderr


def readme_ddp_example() -> str:
    text = (REPO / "README.md").read_text()
    found = re.search(r"<!-- ddp-example -->\n```python\n(.*?)```", text, re.S)
    assert found, "README.md lost its DDP example (marked <!-- ddp-example -->)"
    return found.group(1)


@pytest.mark.mpi
def test_readme_ddp_example_runs_as_written(tmp_path):
    script = tmp_path / "ddp_example.py"
    script.write_text(readme_ddp_example())
    proc = run_mpi(2, args=[sys.executable, str(script)], timeout=240, cwd=tmp_path,
                   env={"OMP_NUM_THREADS": "1"})
    found = re.search(r"loss: (\d+\.\d+) at the first step, (\d+\.\d+) after 30", proc.stdout)
    assert found and float(found.group(2)) < 0.8 * float(found.group(1)), \
        proc.stdout + proc.stderr  # it learns


def test_host_staging_decisions():
    from sparcml.torch._buckets import COMM_DTYPES, comm_dtype, pin_host_buffers
    from sparcml._errors import UnsupportedDtypeError

    cpu, meta = torch.device("cpu"), torch.device("meta")
    cuda = torch.device("cuda", 1)  # a device object needs no GPU
    assert not pin_host_buffers([cpu, cpu], cuda_available=True)
    assert not pin_host_buffers([cuda], cuda_available=False)  # nothing to pin with
    assert pin_host_buffers([cpu, cuda], cuda_available=True)
    assert not pin_host_buffers([meta], cuda_available=True)
    assert comm_dtype("w", torch.bfloat16) is torch.float32 is COMM_DTYPES[torch.float16]
    assert comm_dtype("w", torch.float64) is torch.float64
    with pytest.raises(UnsupportedDtypeError, match="'w' is torch.int64"):
        comm_dtype("w", torch.int64)


def test_gpu_check_refuses_clearly_without_cuda():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: scripts/gpu-check.sh runs for real")
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu-check.sh")], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHON": sys.executable})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no CUDA device" in proc.stderr and "GPU-CHECK" not in proc.stdout, proc.stderr


def test_gpu_check_script_imports_and_picks_devices():
    spec = importlib.util.spec_from_file_location("gpu_check", REPO / "scripts" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    assert [gpu_check.pick_device(r, 2) for r in range(3)] == ["cuda:0", "cuda:1", "cuda:0"]
    assert gpu_check.pick_device(1, 0) == "cpu"
    if not torch.cuda.is_available():
        assert gpu_check.main() == 2  # refuses on the CPU (P = 1, no device)


def test_gpu_check_is_documented_with_whether_it_ran():
    """README points at scripts/gpu-check.sh and says whether it ran on a GPU; BENCHMARKS.md
    has its section, with figures or saying it was not run."""
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "`bash scripts/gpu-check.sh`" in readme
    bench = (REPO / "BENCHMARKS.md").read_text()
    section = bench.split("## GPU check of the PyTorch adapter", 1)[1].split("\n## ", 1)[0]
    ran = "GPU-CHECK OK" in section
    assert ran or "Not run yet" in section, section[:400]
    assert ("has not run on a GPU yet" in readme) != ran
