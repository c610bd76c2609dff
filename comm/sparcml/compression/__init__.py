"""Gradient compression in GRACE's split: compressor, quantizer, memory, communicator."""

from ._objects import *  # noqa: F401,F403
from ._objects import __all__  # noqa: F401
