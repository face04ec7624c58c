"""Tessera: a tile-based kernel JIT. Write kernels with @tessera.kernel and
tessera.language (mirrors triton.language); they run on the CPU (x86-64 vector
code) and, later, NVIDIA GPUs."""
from . import language  # noqa: F401
from .errors import CompilationError, InternalCompilerError  # noqa: F401
from .jit import CompiledKernel, Kernel, jit, kernel, set_debug, set_interpret, synchronize  # noqa: F401
from ._core import _C as _core_C
CudaError = _core_C.CudaError  # a RuntimeError; .code (CUresult), .sticky (the context was reset)
from .compile_api import compile  # noqa: F401
from .language.core import constexpr  # noqa: F401
from .array import Array, empty, from_numpy, zeros  # noqa: F401
from .autotune import AutotuneError, Config, autotune  # noqa: F401
from . import testing  # noqa: F401

__version__ = "0.1.0"


def cdiv(x, y):
    """Ceiling division of integers."""
    return (x + y - 1) // y


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
