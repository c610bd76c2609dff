"""The simulated network: a spec string parsed by one function, and the cost of one message.

Spec vocabulary (that of ``jobs/emulate.sh``'s ``NODESxRATE``, extended with options)::

    NODESxRATE[,ppn=R][,intra=RATE][,latency=TIME][,intra-latency=TIME]
    4x1gbit                        4 nodes, 1 Gbit/s links, 1 rank per node
    1024x10gbit,ppn=8,intra=100gbit,latency=2us

RATE is a number with a unit ``bit``, ``kbit``, ``mbit``, ``gbit`` or ``tbit`` (per second,
decimal prefixes, as ``tc`` reads them) or the same with ``B`` for bytes (``gB`` = 10^9 bytes/s);
TIME is a number with ``s``, ``ms``, ``us`` or ``ns``. Defaults: ``ppn=1``, ``intra=100gbit``
(shared memory), ``latency=5us`` (a TCP or fabric round trip on one switch, half of it),
``intra-latency=0.5us``. NODES x ppn is the largest number of ranks the spec describes; a
simulation of fewer ranks uses the first nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._errors import InvalidArgumentError

__all__ = ["NetworkSpec", "parse_network"]

_RATE_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_RATE = re.compile(r"^([0-9]*\.?[0-9]+)([kmgt]?)(bit|b)$", re.IGNORECASE)
_TIME = re.compile(r"^([0-9]*\.?[0-9]+)(s|ms|us|ns)$")


@dataclass(frozen=True)
class NetworkSpec:
    """A cluster network: ``nodes`` nodes of ``ppn`` ranks; links in bytes per second and
    seconds. ``text`` is the canonical spec string (what records carry)."""

    nodes: int
    ppn: int
    bandwidth: float          # bytes/s of each node's link (both directions, full duplex)
    latency: float            # seconds per message between nodes
    intra_bandwidth: float    # bytes/s between ranks of one node
    intra_latency: float
    text: str

    def __post_init__(self):
        """A spec built directly (not by :func:`parse_network`) is checked as one parsed:
        :class:`~sparcml.InvalidArgumentError` naming the field."""
        for name in ("nodes", "ppn"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InvalidArgumentError(f"NetworkSpec.{name} must be an integer >= 1, got "
                                           f"{v!r}")
        for name, least in (("bandwidth", "> 0"), ("intra_bandwidth", "> 0"),
                            ("latency", ">= 0"), ("intra_latency", ">= 0")):
            v = getattr(self, name)
            ok = not isinstance(v, bool) and isinstance(v, (int, float)) \
                and 0 <= v < float("inf") and (v > 0 or least == ">= 0")
            if not ok:
                unit = "bytes per second" if "bandwidth" in name else "seconds"
                raise InvalidArgumentError(f"NetworkSpec.{name} must be a finite number "
                                           f"{least} ({unit}), got {v!r}")
        if not isinstance(self.text, str):
            raise InvalidArgumentError(f"NetworkSpec.text must be a string, got "
                                       f"{self.text!r}")

    def node_of(self, world_rank: int) -> int:
        return world_rank // self.ppn

    def link(self, src: int, dst: int) -> tuple[float, float]:
        """``(alpha seconds, beta seconds per byte)`` of a message from ``src`` to ``dst``
        (world ranks)."""
        if self.node_of(src) == self.node_of(dst):
            return self.intra_latency, 1.0 / self.intra_bandwidth
        return self.latency, 1.0 / self.bandwidth

    def spans_nodes(self, world_ranks) -> bool:
        return len({self.node_of(r) for r in world_ranks}) > 1

    def collective_link(self, world_ranks) -> tuple[float, float]:
        """The link that bounds a collective among ``world_ranks``: inter-node if they span
        several nodes."""
        if self.spans_nodes(world_ranks):
            return self.latency, 1.0 / self.bandwidth
        return self.intra_latency, 1.0 / self.intra_bandwidth

    def to_dict(self) -> dict:
        return {"spec": self.text, "nodes": self.nodes, "ppn": self.ppn,
                "bandwidth_bytes_per_s": self.bandwidth, "latency_s": self.latency,
                "intra_bandwidth_bytes_per_s": self.intra_bandwidth,
                "intra_latency_s": self.intra_latency}


def _rate(text: str, what: str, spec: str) -> float:
    m = _RATE.match(text)
    if not m or float(m.group(1)) <= 0:
        raise InvalidArgumentError(
            f"network spec {spec!r}: {what} must be a rate such as 10gbit, 100mbit or 12.5gB, "
            f"got {text!r}")
    bytes_per_s = float(m.group(1)) * _RATE_UNITS[m.group(2).lower()]
    bytes_per_s = bytes_per_s / 8 if m.group(3).lower() == "bit" else bytes_per_s
    if not _MIN_RATE <= bytes_per_s <= _MAX_RATE:  # also nan and inf
        raise InvalidArgumentError(
            f"network spec {spec!r}: {what} {text!r} is outside 1 kbit to 1 Pbit per second")
    return bytes_per_s


def _time(text: str, what: str, spec: str) -> float:
    m = _TIME.match(text.strip().lower())
    if not m:
        raise InvalidArgumentError(
            f"network spec {spec!r}: {what} must be a time such as 2us, 0.5us or 1ms, "
            f"got {text!r}")
    seconds = float(m.group(1)) * _TIME_UNITS[m.group(2)]
    if not 0.0 <= seconds <= _MAX_TIME:  # also nan and inf (a latency of 400 nines)
        raise InvalidArgumentError(
            f"network spec {spec!r}: {what} {text!r} is outside 0 to {_MAX_TIME:g} s")
    return seconds


# what a spec may say: beyond these no modeled time is meaningful (and inf or nan would reach
# the records as invalid JSON)
_MIN_RATE, _MAX_RATE = 1e3 / 8, 1e15 / 8
_MAX_TIME = 60.0


def parse_network(spec: str) -> NetworkSpec:
    """Parse ``NODESxRATE[,ppn=R][,intra=RATE][,latency=TIME][,intra-latency=TIME]``.

    Raises :class:`~sparcml.InvalidArgumentError` naming the bad part.
    """
    if isinstance(spec, NetworkSpec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidArgumentError(f"network spec must be a string such as '16x10gbit', "
                                   f"got {spec!r}")
    head, *options = [p.strip() for p in spec.strip().split(",")]
    m = re.match(r"^([1-9][0-9]*)x(.+)$", head)
    if not m:
        raise InvalidArgumentError(
            f"network spec {spec!r}: expected NODESxRATE first (e.g. 4x1gbit, "
            f"1024x10gbit), got {head!r}")
    nodes = int(m.group(1))
    bandwidth = _rate(m.group(2), "the link rate", spec)
    values = {"ppn": "1", "intra": "100gbit", "latency": "5us", "intra-latency": "0.5us"}
    for opt in options:
        key, sep, val = opt.partition("=")
        key = key.strip().lower()
        if not sep or key not in values:
            raise InvalidArgumentError(
                f"network spec {spec!r}: unknown option {opt!r}; options are "
                f"ppn=R, intra=RATE, latency=TIME, intra-latency=TIME")
        values[key] = val.strip()
    if not re.match(r"^[1-9][0-9]*$", values["ppn"]):
        raise InvalidArgumentError(f"network spec {spec!r}: ppn must be a positive integer, "
                                   f"got {values['ppn']!r}")
    ppn = int(values["ppn"])
    intra = _rate(values["intra"], "intra", spec)
    latency = _time(values["latency"], "latency", spec)
    intra_latency = _time(values["intra-latency"], "intra-latency", spec)
    text = f"{head.lower()},ppn={ppn},intra={values['intra'].lower()}," \
           f"latency={values['latency'].lower()},intra-latency={values['intra-latency'].lower()}"
    return NetworkSpec(nodes, ppn, bandwidth, latency, intra, intra_latency, text)
