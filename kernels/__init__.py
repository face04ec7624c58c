"""tessera.kernels (`import tessera.kernels as tk`): a library of fused kernels written
in the Tessera language. Every op takes numpy arrays, torch tensors (CPU, or CUDA on
the GPU back end) or CuPy arrays and returns the same kind; torch tensors that require
grad go through a torch.autograd.Function whose backward is a Tessera kernel too.
`tk.nn` holds drop-in torch modules (FusedLayerNorm, FusedRMSNorm, FusedLinearReLU, ...)."""
from .activation import add_relu, bias_gelu, geglu, gelu_dropout, mul_tanh, swiglu
from .attention import attention_score
from .linear import linear_gelu, linear_relu
from .norm import layer_norm, residual_add_layer_norm, residual_add_rms_norm, rms_norm
from .reduce import reduce_mean_abs, reduce_sum_squared
from .rope import rms_norm_rope
from .softmax_ce import cross_entropy, log_softmax, softmax

__all__ = [
    "layer_norm", "rms_norm", "residual_add_layer_norm", "residual_add_rms_norm", "rms_norm_rope",
    "softmax", "log_softmax", "cross_entropy",
    "add_relu", "mul_tanh", "bias_gelu", "gelu_dropout", "swiglu", "geglu",
    "reduce_sum_squared", "reduce_mean_abs",
    "attention_score", "linear_relu", "linear_gelu",
    "nn",
]


def __getattr__(name):
    # tk.nn needs torch: imported on first use, so numpy-only users never pay for it.
    if name == "nn":
        import importlib
        mod = importlib.import_module(".nn", __name__)
        globals()["nn"] = mod
        return mod
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
