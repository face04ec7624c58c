"""A small SSA builder for Tile IR and its printer (the textual form of docs/tile_ir.md).

The frontend builds a Module of Ops in Regions, then prints it; the C++ compiler parses
the text. Values have no names while building: the printer numbers them %0, %1, ... in
the order they appear in the text (an op's results before its regions' arguments and
contents); kernel arguments keep their parameter names.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from ..language import dtypes as D


def type_str(dtype: D.dtype, shape: tuple) -> str:
    """`f32`, `ptr<f16>`, `tile<64x32xf16>`, `tile<128xptr<f32>>`."""
    if not shape:
        return dtype.ir
    return "tile<" + "x".join(str(d) for d in shape) + "x" + dtype.ir + ">"


class IRType:
    """A scalar (shape == ()) or tile type."""

    __slots__ = ("dtype", "shape")

    def __init__(self, dtype: D.dtype, shape=()):
        self.dtype = dtype
        self.shape = tuple(shape)

    def __eq__(self, other):
        return isinstance(other, IRType) and self.dtype == other.dtype and self.shape == other.shape

    def __hash__(self):
        return hash((self.dtype, self.shape))

    def __str__(self):
        return type_str(self.dtype, self.shape)

    __repr__ = __str__


class IRValue:
    """An SSA value: an op result, a region argument or a kernel argument."""

    __slots__ = ("type", "name")

    def __init__(self, type_: IRType, name: str | None = None):
        self.type = type_
        self.name = name  # only kernel arguments have fixed names

    def __repr__(self):
        return f"<IRValue {self.name or '?'}: {self.type}>"


class Region:
    def __init__(self, arg_types=()):
        self.args = [IRValue(t) for t in arg_types]
        self.ops: list[Op] = []


class Op:
    def __init__(self, name, operands, result_types, attrs, regions, loc):
        self.name = name
        self.operands = list(operands)
        self.results = [IRValue(t) for t in result_types]
        self.attrs = dict(attrs or {})
        self.regions = list(regions)
        self.loc = loc  # (line, col) 1-based, or None

    @property
    def result(self) -> IRValue:
        assert len(self.results) == 1, f"{self.name} has {len(self.results)} results"
        return self.results[0]


class KernelArg:
    def __init__(self, name, type_: IRType, attrs):
        self.name = name
        self.value = IRValue(type_, name)
        self.attrs = dict(attrs or {})


class Module:
    """One kernel: `kernel @name(args) attributes {...} { body }`."""

    def __init__(self, name, args, attrs):
        self.name = name
        self.args = args
        self.attrs = dict(attrs)
        self.body = Region()


class IRBuilder:
    """Appends ops at an insertion point (the end of a region); `loc` is stamped on
    every op created until it changes."""

    def __init__(self, module: Module):
        self.module = module
        self._regions = [module.body]
        self.loc = None

    @property
    def region(self) -> Region:
        return self._regions[-1]

    @contextmanager
    def at_end_of(self, region: Region):
        self._regions.append(region)
        try:
            yield region
        finally:
            self._regions.pop()

    def create(self, name, operands=(), result_types=(), attrs=None, regions=(), insert=True) -> Op:
        for v in operands:
            assert isinstance(v, IRValue), f"operand of {name} is {v!r}, not an IRValue"
        op = Op(name, operands, result_types, attrs, regions, self.loc)
        if insert:
            self.region.ops.append(op)
        return op

    def insert(self, op: Op):
        self.region.ops.append(op)


# --------------------------------------------------------------------------- printing

def format_float(x: float) -> str:
    """A spelling that round-trips a double and reads as a float (`1.0`, `1.0e-30`)."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = repr(float(x))
    if "e" in text:
        mant, exp = text.split("e")
        if "." not in mant:
            mant += ".0"
        return f"{mant}e{exp}"
    if "." not in text:
        text += ".0"
    return text


def format_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def format_attr(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    raise TypeError(f"cannot print attribute value {value!r}")


def format_attrs(attrs: dict) -> str:
    # keys sorted, as the C++ printer does, so that frontend text and C++-printed text
    # of the same module are byte-identical
    return "{" + ", ".join(f"{k} = {format_attr(attrs[k])}" for k in sorted(attrs)) + "}"


class _Printer:
    def __init__(self):
        self.names = {}
        self.counter = 0
        self.lines = []

    def define(self, v: IRValue) -> str:
        if v.name is not None:
            name = "%" + v.name
        else:
            name = f"%{self.counter}"
            self.counter += 1
        self.names[id(v)] = name
        return name

    def use(self, v: IRValue) -> str:
        try:
            return self.names[id(v)]
        except KeyError:
            raise AssertionError(f"value {v!r} used before its definition") from None

    def print_region_body(self, region: Region, indent: int):
        for op in region.ops:
            self.print_op(op, indent)

    def print_op(self, op: Op, indent: int):
        pad = "  " * indent
        text = pad
        # Uses come before definitions: operands are printed first.
        operands = ", ".join(self.use(v) for v in op.operands)
        if op.results:
            text += ", ".join(self.define(r) for r in op.results) + " = "
        text += op.name
        if operands:
            text += " " + operands
        if op.attrs:
            text += " " + format_attrs(op.attrs)
        if op.results:
            text += " : " + ", ".join(str(r.type) for r in op.results)
        if not op.regions:
            if op.loc is not None:
                text += f" loc({op.loc[0]}:{op.loc[1]})"
            self.lines.append(text)
            return
        for i, region in enumerate(op.regions):
            text += " {" if i == 0 else "} {"
            self.lines.append(text)
            if region.args:
                args = ", ".join(f"{self.define(a)}: {a.type}" for a in region.args)
                self.lines.append(f"{pad}  ^({args}):")
            self.print_region_body(region, indent + 1)
            text = pad
        text += "}"
        if op.loc is not None:
            text += f" loc({op.loc[0]}:{op.loc[1]})"
        self.lines.append(text)


def print_module(module: Module) -> str:
    p = _Printer()
    args = []
    for a in module.args:
        p.define(a.value)
        s = f"%{a.name}: {a.value.type}"
        if a.attrs:
            s += " " + format_attrs(a.attrs)
        args.append(s)
    head = f"kernel @{module.name}({', '.join(args)})"
    if module.attrs:
        head += " attributes " + format_attrs(module.attrs)
    p.lines.append(head + " {")
    p.print_region_body(module.body, 1)
    p.lines.append("}")
    return "\n".join(p.lines) + "\n"


# --------------------------------------------------------------------------- rewriting

def replace_uses(region: Region, mapping: dict):
    """Replace operands (recursively, in nested regions too): mapping is id(IRValue) ->
    IRValue."""
    for op in region.ops:
        op.operands = [mapping.get(id(v), v) for v in op.operands]
        for r in op.regions:
            replace_uses(r, mapping)
