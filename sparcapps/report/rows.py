"""Records -> the rows that tables and figures show: one per ok collective measurement (or
simulation), with its speedup over dense and the speedup's spread from the quartiles."""

from __future__ import annotations

from typing import Any, Iterable

from .commands import command_of
from .fmt import field, network_label

__all__ = ["REFERENCES", "collective_rows", "series_label", "dense_name"]

# reference times: flat metrics key, label, line style; sparc-bench nests them in metrics.model
REFERENCES = (("model_seconds", "model", "--"), ("rsag_seconds", "RS+AG volume", "-."),
              ("floor_seconds", "lower bound", ":"))
_MODEL_KEYS = {"model_seconds": "predicted_s", "rsag_seconds": "rs_ag_s",
               "floor_seconds": "floor_s"}


def dense_name() -> str:
    from sparcml import DENSE_BASELINE  # sparcml (numba, MPI): sparc-report runs without it

    return DENSE_BASELINE


def _reference(rec: dict, key: str) -> Any:
    """A model/reference time: ``metrics["model"][...]`` (sparc-bench) or ``metrics[key]``."""
    metrics = rec.get("metrics") or {}
    model = metrics.get("model")
    if isinstance(model, dict) and model.get(_MODEL_KEYS[key]) is not None:
        return model[_MODEL_KEYS[key]]
    return metrics.get(key)


def _sent(rec: dict) -> Any:
    """Bytes sent per rank: ``sent_per_rank``, else the slowest rank's ``sent_per_rank_max``."""
    b = rec.get("bytes") or {}
    return b.get("sent_per_rank", b.get("sent_per_rank_max"))


def series_label(rec: dict) -> str:
    """The configuration of one line in a figure: the algorithm and what changes it
    (QSGD bits, non-blocking, reused output); the network is shown by the marker."""
    metrics = rec.get("metrics") or {}
    label = str(rec.get("algorithm"))
    if metrics.get("bits"):
        label += f" + {metrics['bits']}-bit QSGD" + (" (sparse too)"
                                                     if metrics.get("quantize_sparse") else "")
    if metrics.get("nonblocking"):
        label += ", non-blocking"
    if metrics.get("reuse_output"):
        label += ", reused out="
    return label


_MODELED_ONLY = "; modeled only"  # network_label's mark of a row predicted, not simulated


def _key(rec: dict) -> tuple:
    """What must match for two records to be compared: input, network, simulated or not (a
    modeled-only dense row, too large to simulate, is the baseline of its network's rows)."""
    net = network_label(rec)
    if isinstance(net, str) and net.endswith(_MODELED_ONLY):
        net = net[:-len(_MODELED_ONLY)]
    return (rec.get("P"), rec.get("N"), rec.get("density"), field(rec, "pattern"),
            field(rec, "dtype"), bool(rec.get("simulated")), net)


def collective_rows(records: Iterable[dict]) -> list[dict[str, Any]]:
    """One row per ok record with an ``allreduce`` timing.

    Keys: source, P, nodes, N, density, pattern, dtype, algorithm, series (configuration
    label), simulated (bool), network (label or None), median, q25, q75, n (seconds),
    speedup (dense median / median; None at P = 1, where nothing is communicated),
    speedup_lo / speedup_hi (dense q25 / q75 and dense q75 / q25 when the dense record of the
    same input is there, else None), speedup_n (the fewer repetitions of the two, None without
    the dense record), sent_per_rank (bytes, the slowest rank's when recorded so),
    model_seconds, rsag_seconds, floor_seconds, command (a
    :class:`~sparcapps.report.commands.Command`), record (the record itself).
    The dense record of an input is looked up in the same file and the same configuration
    (QSGD bits and flags aside).
    """
    recs = [r for r in records if r.get("status") == "ok"
            and "allreduce" in (r.get("timings") or {})]
    dense_alg = dense_name()
    dense = {}
    for r in recs:
        if r.get("algorithm") == dense_alg and not (r.get("metrics") or {}).get("bits"):
            dense[(r["_source"].rsplit(":", 1)[0], *_key(r))] = r["timings"]["allreduce"]
    rows = []
    for r in recs:
        t = r["timings"]["allreduce"]
        d = dense.get((r["_source"].rsplit(":", 1)[0], *_key(r)))
        speedup = (r.get("metrics") or {}).get("speedup_over_dense")
        if speedup is None and d is not None and t["median"] > 0:
            speedup = d["median"] / t["median"]
        if r.get("P") == 1:  # no communication: a ratio of local copies, not a speedup
            speedup = d = None
        lo = hi = None
        if d is not None and t.get("q25") and t.get("q75") and d.get("q25") is not None:
            lo, hi = d["q25"] / t["q75"], d["q75"] / t["q25"]
            if not lo <= speedup <= hi:  # a recorded speedup from other timings: no range
                lo = hi = None
        rows.append({
            "source": r.get("_source"), "P": r.get("P"), "nodes": r.get("nodes"), "N": r.get("N"),
            "density": r.get("density"), "pattern": field(r, "pattern"),
            "dtype": field(r, "dtype"), "algorithm": r.get("algorithm"),
            "series": series_label(r), "simulated": bool(r.get("simulated")),
            "network": network_label(r),
            "median": t["median"], "q25": t.get("q25"), "q75": t.get("q75"), "n": t.get("n"),
            "speedup": speedup, "speedup_lo": lo, "speedup_hi": hi,
            "speedup_n": min(t.get("n") or 0, d.get("n") or 0) if d is not None else None,
            "sent_per_rank": _sent(r),
            **{k: _reference(r, k) for k, _, _ in REFERENCES},
            "command": command_of(r), "record": r})
    rows.sort(key=lambda x: tuple((v is None, v if v is not None else 0) for v in
                                  (x["N"], x["pattern"], x["density"], x["P"], x["series"])))
    return rows
