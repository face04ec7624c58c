"""tl.math: libdevice-style names for the math builtins."""
from .core import (exp, exp2, log, log2, sqrt, sqrt_rn, rsqrt, sin, cos, abs, floor,  # noqa: F401
                   ceil, erf, tanh, sigmoid, fma, umulhi, fdiv, div_rn, cdiv, maximum as max,
                   minimum as min)
