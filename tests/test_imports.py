"""Import hygiene: no torch behind ``import sparcml`` or the CLIs that do not need it, and the
public API listed in ``__all__`` really exists."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["sparcml", "sparcapps.bench.cli", "sparcapps.data",
                                    "sparcapps.report", "sparcapps.records"])
def test_importing_does_not_pull_in_torch(module):
    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_public_api_exists():
    import sparcml

    for name in sparcml.__all__:
        assert hasattr(sparcml, name), name
