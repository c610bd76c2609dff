"""Load mpi4py's ``MPI`` once, and say what to install when no MPI library can be loaded.

mpi4py's binary wheels load ``libmpi`` when ``mpi4py.MPI`` is imported; without one (``pip
install sparcml`` with no extra on a machine without an MPI) the error is only mpi4py's
"cannot load MPI library" and a list of ``libmpi.so``'s that were not found. Importing this
module raises :class:`MPILibraryNotFound` (an ``ImportError``) that names both ways out.
"""

from __future__ import annotations

__all__ = ["MPI", "MPILibraryNotFound", "MISSING_MPI_HINT"]

MISSING_MPI_HINT = (
    "sparcml needs an MPI library and none could be loaded. Either install the bundled MPICH "
    "(pip install 'sparcml[mpich]', which also puts mpiexec into the environment), or use the "
    "system's MPI: load it (e.g. `module load openmpi`) and rebuild mpi4py against it "
    "(pip install --no-binary=mpi4py --force-reinstall mpi4py), or point MPI4PY_LIBMPI at its "
    "libmpi.so.")


class MPILibraryNotFound(ImportError):
    """``mpi4py.MPI`` could not load an MPI library; the message says what to install."""


try:
    from mpi4py import MPI
except ImportError as exc:
    if getattr(exc, "name", None) == "mpi4py":
        raise MPILibraryNotFound("sparcml needs mpi4py: pip install mpi4py (or "
                                 "'sparcml[mpich]' for a bundled MPI)") from exc
    raise MPILibraryNotFound(f"{MISSING_MPI_HINT} (mpi4py: {exc})") from exc
except (RuntimeError, OSError) as exc:
    detail = " ".join(str(exc).split())
    raise MPILibraryNotFound(f"{MISSING_MPI_HINT} (mpi4py: {detail})") from None
