"""Gradient compression in GRACE's split: compressor, quantizer, memory, communicator."""

from ._objects import *  # noqa: F401,F403
from ._objects import __all__ as _objects_all
from ._sparsifiers import *  # noqa: F401,F403
from ._sparsifiers import __all__ as _sparsifiers_all
from ._quantizers import *  # noqa: F401,F403
from ._quantizers import __all__ as _quantizers_all
from ._powersgd import *  # noqa: F401,F403
from ._powersgd import __all__ as _powersgd_all
from ._catalog import COMPRESSORS, build  # noqa: F401
from ._cost import predicted_seconds  # noqa: F401

__all__ = [*_objects_all, *_sparsifiers_all, *_quantizers_all, *_powersgd_all,
           "COMPRESSORS", "build", "predicted_seconds"]
