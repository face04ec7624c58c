"""tessera.language: the kernel language (mirrors triton.language)."""
from .dtypes import (dtype, pointer_type, int1, int8, int16, int32, int64, uint8, uint16,  # noqa: F401
                     uint32, uint64, float16, bfloat16, float32, float64)
from .core import *  # noqa: F401,F403
from .core import constexpr, tensor, builtin, is_builtin, range, static_range  # noqa: F401
from . import math  # noqa: F401
from . import extra  # noqa: F401  (tl.extra.cuda.gdc_wait, ...)

bool_ = int1
float8 = None  # not supported yet
