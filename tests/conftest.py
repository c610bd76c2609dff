import sys
from pathlib import Path

# tests/ helpers (mpirun.py, reference kernels) importable as plain modules
sys.path.insert(0, str(Path(__file__).resolve().parent))
