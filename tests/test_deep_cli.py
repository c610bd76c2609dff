"""sparc-cnn / sparc-lstm without torch in the test process: imports stay light, --help works."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["sparcapps.deep", "sparcapps.deep.cnn", "sparcapps.deep.lstm",
                                    "sparcapps.deep.data", "sparcapps.deep.train"])
def test_importing_the_apps_does_not_import_torch(module):
    code = f"import sys, {module}; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("app", ["cnn", "lstm"])
def test_help_lists_the_options(app):
    out = subprocess.run([sys.executable, "-m", f"sparcapps.deep.{app}", "--help"], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    for flag in ("--density", "--bits", "--algorithm", "--no-error-feedback", "--dense",
                 "--epochs", "--batch-size", "--lr", "--seed", "--width", "--depth", "--output",
                 "--checkpoint-every", "--resume", "--threads"):
        assert flag in out, flag
