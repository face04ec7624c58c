"""torch.autograd.Function wrappers: each op's forward and backward kernels, for torch
tensors that require grad (CPU or CUDA). Without torch this module defines nothing
but wants_grad, which is then always False.

Each Function takes its tensors and one tuple of options (`opts`): apply() inspects
every argument, and backward() returns a gradient slot for each, so three options as
one argument cost ~0.5 us less per fwd+bwd (bench/results/host_time_cpu_hostpath.md)."""
from __future__ import annotations

from . import _host as H

torch = H.torch


def wants_grad(*tensors) -> bool:
    if torch is None or not torch.is_grad_enabled():
        return False
    for t in tensors:  # a loop, not any(generator): this runs on every op call
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return True
    return False


if torch is not None:
    from . import activation as A
    from . import attention as AT
    from . import linear as L
    from . import norm as N
    from . import reduce as R
    from . import rope as RP
    from . import softmax_ce as S

    class Norm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, residual, weight, bias, opts):
            op, eps, is_rms, relu = opts
            y, h, mean, rstd = N.norm_forward(op, x, residual, weight, bias, eps, is_rms, relu)
            ctx.save_for_backward(h if h is not None else x, weight, bias, mean, rstd)
            ctx.flags = (is_rms, relu, residual is not None)
            # An unused output (often the new residual) gets None, not a tensor of zeros
            # the backward kernel would have to read.
            ctx.set_materialize_grads(False)
            return (y, h) if residual is not None else y

        @staticmethod
        def backward(ctx, dy, dh=None):
            xin, w, b, mean, rstd = ctx.saved_tensors
            is_rms, relu, has_res = ctx.flags
            if dy is None:  # only the new residual was used: it is x + residual
                return dh, dh, None, None, None
            dx, dw, db = N.norm_backward(xin, w, b, mean, rstd, dy, dh, is_rms, relu)
            return dx, (dx if has_res else None), dw, db, None

    class RmsNormRope(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, cos, sin, eps):
            y, rstd = RP.rms_norm_rope_forward(x, weight, cos, sin, eps)
            ctx.save_for_backward(x, weight, cos, sin, rstd)
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w, cos, sin, rstd = ctx.saved_tensors
            dx, dw = RP.rms_norm_rope_backward(x, w, cos, sin, rstd, dy)
            return dx, dw, None, None, None

    class Softmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, opts):
            dim, log, p, seed = opts
            y = S.softmax_forward(x, dim, log, p, seed)
            # With dropout the backward pass recomputes the softmax from x (the output
            # lost the dropped values); otherwise it needs only y.
            ctx.save_for_backward(x if p > 0 else y)
            ctx.args = opts
            return y

        @staticmethod
        def backward(ctx, dy):
            (saved,) = ctx.saved_tensors
            dim, log, p, seed = ctx.args
            return S.softmax_backward(saved, dy, dim, log, p, seed), None

    class CrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, target, opts):
            ignore_index, reduction, label_smoothing = opts
            out, scale, lse = S._cross_entropy_fast(logits, target, ignore_index, label_smoothing, reduction, True) \
                or S.cross_entropy_forward(logits, target, ignore_index, label_smoothing, reduction)
            ctx.save_for_backward(logits, target, lse)
            ctx.args = (ignore_index, reduction, label_smoothing, scale)
            return out

        @staticmethod
        def backward(ctx, dloss):
            logits, target, lse = ctx.saved_tensors
            ignore_index, reduction, label_smoothing, scale = ctx.args
            dlogits = S.cross_entropy_backward(logits, target, lse, dloss, scale, ignore_index, label_smoothing)
            return dlogits, None, None

    class Elementwise(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, opts):
            op, tanh, p, seed, bias_mode = opts
            y = A.elementwise_forward(op, a, b, p, seed, bias_mode, tanh)
            # relu(a + b)'s gradient needs only the output's sign (as torch's relu, which
            # tests its output): the backward reads y and dy and writes one gradient that
            # both inputs get, 3 arrays where reading a and b and writing da and db made 5.
            ctx.save_for_backward(*((y, None) if op == A.ADD_RELU else (a, b)))
            ctx.args = opts
            return y

        @staticmethod
        def backward(ctx, dy):
            a, b = ctx.saved_tensors
            op, tanh, p, seed, bias_mode = ctx.args
            if op == A.ADD_RELU:
                g = A.elementwise_backward(A.RELU_OP, a, None, dy, 0.0, 0, A.NO_B)[0]
                return g, g, None
            da, db = A.elementwise_backward(op, a, b, dy, p, seed, bias_mode, tanh)
            return da, db, None

    class ReduceDim(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, opts):
            dim, op = opts
            ctx.save_for_backward(x)
            ctx.args = opts
            return R.reduce_dim(x, dim, op)

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            dim, op = ctx.args
            return R.reduce_dim_backward(x, dy, dim, op), None

    class AttentionScore(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, scale):
            ctx.save_for_backward(q, k)
            ctx.scale = scale
            return AT.attention_score_forward(q, k, scale)

        @staticmethod
        def backward(ctx, ds):
            q, k = ctx.saved_tensors
            dq, dk = AT.attention_score_backward(q, k, ds, ctx.scale)
            return dq, dk, None

    class Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias, act):
            y, z = L.linear_forward(x, weight, bias, act, keep_preactivation=True)
            ctx.save_for_backward(x, weight, z if z is not None else y)
            ctx.args = (act, bias is not None)
            return y

        @staticmethod
        def backward(ctx, dy):
            x, w, z_or_y = ctx.saved_tensors
            act, has_bias = ctx.args
            dx, dw, db = L.linear_backward(x, w, z_or_y, dy, act, has_bias)
            return dx, dw, db, None
