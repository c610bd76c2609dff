"""sparc-cnn / sparc-lstm without torch in the test process: imports stay light, --help works."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["sparcapps.deep", "sparcapps.deep.cnn", "sparcapps.deep.lstm",
                                    "sparcapps.deep.tasks", "sparcapps.deep.checkpoint",
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
                 "--checkpoint-every-epochs", "--resume", "--threads", "--data-home"):
        assert flag in out, flag


def test_the_communication_flags_build_a_compression():
    from sparcml import DENSE_BASELINE, DEFAULT_ALGORITHM
    from sparcml.compression import NoneMemory, ResidualMemory, TopKCompressor

    from sparcapps.deep import cnn
    from sparcapps.deep.train import _check_args, compression_from_args

    parse = cnn.build_parser().parse_args
    c = compression_from_args(parse([]))  # --bits 0, full precision, is every CLI's default
    assert c.compressor == TopKCompressor(density=0.01) and c.quantizer is None
    assert isinstance(c.memory, ResidualMemory) and c.algorithm == DEFAULT_ALGORITHM
    assert compression_from_args(parse(["--bits", "4"])).quantizer.bits == 4
    c = compression_from_args(parse(["--bits", "0", "--no-error-feedback", "--density", "0.1",
                                     "--topk-bucket-size", "512", "--algorithm", "auto"]))
    assert c.compressor == TopKCompressor(density=0.1, chunk=512) and c.quantizer is None
    assert isinstance(c.memory, NoneMemory) and c.algorithm == "auto"
    assert compression_from_args(parse(["--dense"])).algorithm == DENSE_BASELINE
    assert _check_args(parse([])) == []
    assert _check_args(parse(["--dense", "--algorithm", DENSE_BASELINE])) == []
    (problem,) = _check_args(parse(["--algorithm", DENSE_BASELINE, "--bits", "4"]))
    assert problem.startswith("--bits needs a sparse algorithm") and "--bits 0" in problem
    with pytest.raises(SystemExit):  # argparse refuses it: one line, exit 2
        parse(["--algorithm", "ring"])
    args = parse([])
    args.algorithm = "ring"
    (problem,) = _check_args(args)
    assert problem.startswith("--algorithm: unknown algorithm 'ring'")
