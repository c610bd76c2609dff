"""sparcml.topk_allreduce: the distributed selection kernels against NumPy. The collective
against the top-k of the dense sum is in the test matrix (tests/matrix/topk.py, run on real and
simulated ranks by tests/test_matrix.py)."""

import numpy as np
import pytest

from mpirun import run_mpi

from sparcml._topk import select_kernels

F32 = (np.uint32, np.uint64(0x7FFFFFFF), np.uint64(0x7F800000))


def keys_of(x):
    bits, absmask, _ = F32
    return select_kernels.magnitude_keys(x.view(bits), absmask)


def test_magnitude_keys_order_by_absolute_value():
    x = np.array([0.0, -0.0, 1.5, -1.5, -3.0, 1e-30, np.inf, 2.0], np.float32)
    keys = keys_of(x)
    assert keys[0] == keys[1] == 0 and keys[2] == keys[3]
    assert np.array_equal(np.argsort(keys[2:], kind="stable"),
                          np.argsort(np.abs(x[2:]), kind="stable"))


def test_range_histogram_counts_nonzero_keys_in_an_interval():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(5000) * 10).astype(np.float32)
    x[::7] = 0
    x[3] = np.nan
    x[4] = np.inf
    keys = keys_of(x)
    nz = keys[(keys != 0) & (keys <= F32[2])]
    base, span, shift = select_kernels.first_interval(int(np.median(nz)), 23, 11)
    assert shift == 23 + 4 - 11 and span <= (1 << 11) << shift and base + span == np.median(nz) + 1
    hist = np.zeros((1 << 11) + select_kernels.EXTRA_SLOTS, np.int64)
    select_kernels.range_histogram(keys, np.uint64(base), np.uint64(span), shift, True, F32[2],
                                   hist)
    inside = nz[(nz >= base) & (nz < base + span)]
    assert np.array_equal(hist[:2048], np.bincount(((inside - base) >> shift).astype(np.int64),
                                                   minlength=2048))
    extra = hist[2048:]
    assert extra[select_kernels.NAN] == 1  # the NaN
    assert extra[select_kernels.BELOW] == np.count_nonzero(nz < base)
    assert extra[select_kernels.ABOVE] == np.count_nonzero(nz >= base + span)  # Inf among them
    hist[:] = 0  # a later round: only the keys inside, no extra slots
    select_kernels.range_histogram(keys, np.uint64(base), np.uint64(1000), 0, False, F32[2], hist)
    inside = nz[(nz >= base) & (nz < base + 1000)]
    assert np.array_equal(hist[:1000], np.bincount((inside - base).astype(np.int64),
                                                   minlength=1000))
    assert not hist[1000:].any()
    assert select_kernels.max_key(x[5:].view(np.uint32), F32[1]) == keys_of(x[5:]).max()
    assert select_kernels.min_key(x[5:].view(np.uint32), F32[1]) == 0  # the zeros


def test_kth_largest_below_and_take_top_against_numpy():
    rng = np.random.default_rng(1)
    for trial in range(30):
        bits = rng.integers(1, 40 if trial % 2 else 1 << 31, 500).astype(np.uint32)
        bits[::5] |= np.uint32(1 << 31)  # sign bits: masked off
        keys = (bits & np.uint32(0x7FFFFFFF)).astype(np.uint64)
        high = np.uint64(np.quantile(keys, 0.8)) if trial % 3 else np.uint64(2**64 - 1)
        below = keys[keys < high]
        want = int(rng.integers(1, below.size + 1))
        kth, ties, above = select_kernels.kth_largest_below(bits, F32[1], high, want, 31)
        assert kth == np.sort(below)[::-1][want - 1]
        assert ties == want - np.count_nonzero(below > kth)
        assert above == np.count_nonzero(keys >= high)
        idx = np.arange(0, 1000, 2, dtype=np.int32)
        val = bits.view(np.float32)
        out_idx, out_val = select_kernels.take_top(idx, val, bits, F32[1], high, kth, ties,
                                                   above + want)
        order = np.lexsort((np.arange(keys.size), ~keys))  # by key descending, then position
        expect = np.sort(np.concatenate([np.flatnonzero(keys >= high),
                                         [i for i in order if keys[i] < high][:want]]))
        expect = expect.astype(np.int64)
        assert out_idx.tolist() == idx[expect].tolist()
        assert out_val.view(np.uint32).tolist() == bits[expect].tolist()
        # the two in one call: the same entries, or all of them when no more are wanted
        one_idx, one_val = select_kernels.select_top(idx, val, bits, F32[1], high, want, 31)
        assert one_idx.tolist() == out_idx.tolist()
        assert one_val.view(np.uint32).tolist() == out_val.view(np.uint32).tolist()
        every = below.size  # want = all the keys below high: a copy of the whole input
        all_idx, all_val = select_kernels.select_top(idx, val, bits, F32[1], high, every, 31)
        assert all_idx.tolist() == idx.tolist() and all_idx is not idx
        assert all_val.view(np.uint32).tolist() == bits.tolist()


def test_select_at_threshold_takes_the_ties_of_lowest_position():
    keys = np.array([5, 0, 3, 5, 7, 3, 3, 1], np.uint64)
    assert select_kernels.select_at_threshold(keys, np.uint64(3), 0, 2).tolist() == [0, 2, 3, 4,
                                                                                     5]
    assert select_kernels.count_at_threshold(keys, np.uint64(3), 0) == 3
    assert select_kernels.select_at_threshold(keys, np.uint64(0), 0, 0).tolist() == [
        0, 2, 3, 4, 5, 6, 7]  # every nonzero key
    assert select_kernels.select_at_threshold(keys, np.uint64(1), 1, 0).tolist() == [0, 3, 4]


def test_drop_and_zero_indices():
    idx = np.array([1, 4, 6, 9], np.int32)
    val = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    out_idx, out_val = select_kernels.drop_indices(idx, val, np.array([0, 4, 9, 12], np.int32))
    assert out_idx.tolist() == [1, 6] and out_val.tolist() == [1.0, 3.0]
    dense = np.arange(1, 6, dtype=np.float64)
    assert select_kernels.zero_indices(dense, np.array([0, 3])).tolist() == [0, 2, 3, 0, 5]
    assert dense.tolist() == [1, 2, 3, 4, 5]


def test_bin_counts_keep_histograms_small_next_to_the_selection():
    assert select_kernels.digit_bits(167772, 8) == 11
    assert select_kernels.digit_bits(25, 8) == 4
    for k in (1, 100, 3000, 10**6):
        bits = select_kernels.digit_bits(k, 8)
        assert bits == 4 or (1 << bits) * 8 <= k * 8 / 8
    assert select_kernels.round_shift(1 << 20, 11) == 9
    assert select_kernels.round_shift(2049, 11) == 1 and select_kernels.round_shift(2048, 11) == 0


def test_cost_model_knows_topk_allreduce():
    from sparcml import CostModel
    from sparcml._model.costmodel import TOPK_STEP

    model = CostModel()
    # where ssar's union still grows with P (at k = 2^17 it fills N by P = 1,024: its blocks
    # go dense and their allgather, the values straight into the result, is bounded by N)
    N, k = 1 << 24, 1 << 12
    topk = [model.predict_topk(P=P, N=N, k_local=k, k=k) for P in (4, 1024)]
    ssar = [model.predict("ssar_split_allgather", P=P, N=N, k=k) for P in (4, 1024)]
    assert 0 < topk[0] and topk[1] / topk[0] < ssar[1] / ssar[0]
    assert model.choose_topk_step(P=64, N=N, k=k) == TOPK_STEP
    assert model.choose_topk_step(P=2, N=1 << 10, k=4) != TOPK_STEP  # latency-bound


def test_cost_model_prices_the_synchronizing_steps_and_follows_the_calibration():
    from sparcml import CostModel
    from sparcml._model.costmodel import TOPK_STEP, topk_sync_steps

    model = CostModel(allreduce_alpha=1e-3)  # a node where every step costs a millisecond
    N, k = 1 << 24, 167772
    first = model.predict_topk(P=4, N=N, k_local=k, k=k, remembered=False)
    later = model.predict_topk(P=4, N=N, k_local=k, k=k)
    assert topk_sync_steps(False) == topk_sync_steps(True) + 1
    assert first - later >= model.allreduce_alpha  # the histogram round's step, priced
    cheap = CostModel(allreduce_alpha=1e-6)
    assert later - cheap.predict_topk(P=4, N=N, k_local=k, k=k) >= \
        topk_sync_steps(True) * (1e-3 - 1e-6)
    # calibrated (as auto.calibrate_topk leaves it): the measured fixed costs decide
    rd = "ssar_recursive_double"
    for topk_fixed, expect in ((0.5, rd), (1e-4, TOPK_STEP)):
        model = CostModel(overhead={rd: 1e-3, TOPK_STEP: topk_fixed},
                          scale={rd: 1.0, TOPK_STEP: 1.0})
        assert model.predict_topk(P=4, N=N, k_local=k, k=k) >= topk_fixed
        assert model.choose_topk_step(P=4, N=N, k=k, candidates=[rd]) == expect


def test_global_topk_compression_takes_no_quantizer():
    from sparcml import QSGD, IncompatibleOptionsError
    from sparcml.compression._objects import Compression, GlobalTopKCompressor, TopKCompressor

    with pytest.raises(IncompatibleOptionsError, match="takes no quantizer"):
        Compression(GlobalTopKCompressor(density=0.01), quantizer=QSGD(4))
    assert GlobalTopKCompressor(k=5).global_k(100) == 5
    assert TopKCompressor(k=5).global_k(100) is None
    assert repr(GlobalTopKCompressor(density=0.5)) == "GlobalTopKCompressor(density=0.5)"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_calibrate_topk_measures_topk_allreduce_into_the_model(nprocs):
    """sparcml.calibrate_topk adds topk_allreduce's fixed cost and growth to a calibrated
    model, the same on every rank (P = 1: nothing to measure, the model unchanged)."""
    proc = run_mpi(nprocs, """
        import sparcml
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        model = sparcml.calibrate(comm, reps=1)
        before = dict(model.overhead)
        same = sparcml.calibrate_topk(model, comm, reps=1)
        assert same is model
        name = sparcml.TOPK_ALLREDUCE
        if comm.size == 1:
            assert model.overhead == before and name not in model.overhead
        else:
            assert model.overhead[name] > 0 and model.scale[name] > 0
            assert comm.allgather(model.to_dict()) == [model.to_dict()] * comm.size
            choice = model.choose_topk_step(P=comm.size, N=1 << 20, k=1000)
            assert choice == name or choice in sparcml.ALGORITHMS
        if comm.rank == 0:
            print("CALIBRATED", flush=True)
    """, timeout=600)
    assert "CALIBRATED" in proc.stdout
