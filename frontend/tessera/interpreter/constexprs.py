"""The constexpr values an interpreted kernel receives: tl.constexpr plus the Python
operators triton.language.constexpr has, so that `BLOCK // 2`, `BLOCK > 16` or
calling a constexpr function work when the kernel runs as Python. Arithmetic is
Python's (it happens at compile time in compiled code) and yields constexprs; an
operation with a tensor defers to the tensor, where constexprs are weak scalars."""
from __future__ import annotations

import operator

from ..language import core


def _value(x):
    return x.value if isinstance(x, core.constexpr) else x


def _binary(op):
    def forward(self, other):
        if isinstance(other, core.tensor):
            return NotImplemented
        return KernelConstexpr(op(self.value, _value(other)))

    def reflected(self, other):
        if isinstance(other, core.tensor):
            return NotImplemented
        return KernelConstexpr(op(_value(other), self.value))

    return forward, reflected


class KernelConstexpr(core.constexpr):
    __add__, __radd__ = _binary(operator.add)
    __sub__, __rsub__ = _binary(operator.sub)
    __mul__, __rmul__ = _binary(operator.mul)
    __truediv__, __rtruediv__ = _binary(operator.truediv)
    __floordiv__, __rfloordiv__ = _binary(operator.floordiv)
    __mod__, __rmod__ = _binary(operator.mod)
    __pow__, __rpow__ = _binary(operator.pow)
    __lshift__, __rlshift__ = _binary(operator.lshift)
    __rshift__, __rrshift__ = _binary(operator.rshift)
    __and__, __rand__ = _binary(operator.and_)
    __or__, __ror__ = _binary(operator.or_)
    __xor__, __rxor__ = _binary(operator.xor)
    __lt__, _ = _binary(operator.lt)
    __le__, _ = _binary(operator.le)
    __gt__, _ = _binary(operator.gt)
    __ge__, _ = _binary(operator.ge)
    __hash__ = core.constexpr.__hash__

    def __neg__(self):
        return KernelConstexpr(-self.value)

    def __pos__(self):
        return self

    def __invert__(self):
        return KernelConstexpr(~self.value)

    def __abs__(self):
        return KernelConstexpr(abs(self.value))

    def __int__(self):
        return int(self.value)

    def __float__(self):
        return float(self.value)

    def __call__(self, *args, **kwargs):
        return self.value(*args, **kwargs)

    def __getitem__(self, index):
        return KernelConstexpr(self.value[_value(index)])

    def __len__(self):
        return len(self.value)

    def __iter__(self):
        return iter(self.value)

    def __getattr__(self, name):
        if name == "value":
            raise AttributeError(name)
        return getattr(self.value, name)
