"""Python AST -> Tile IR: the code generator's entry point and its expression half.

generate_tile_ir(fn, arg_types, constexprs, arg_attrs, options) walks the kernel's
`def` with an ast.NodeVisitor, keeps compile-time Python values as Python objects
(constexpr folding), emits IR for everything else through the Semantic layer, inlines
calls to helpers and other kernels, and prints the module. Statements and control flow
live in codegen_statements.py.
"""
from __future__ import annotations

import ast
import builtins as py
import inspect
import operator

from ..errors import CallSite, CompilationError, InternalCompilerError
from ..language import core
from ..language import dtypes as D
from ..language.semantics import SemanticError
from .builtins_impl import BUILTINS, TENSOR_METHODS
from .codegen_statements import StatementsMixin
from .ir_builder import IRBuilder, IRType, KernelArg, Module, print_module
from .semantic import Semantic
from .source import SourceUnavailable, function_source
from .values import (BlockPointer, BoundMethod, ShapeTuple, TileTypeInfo, Value, describe,
                     is_number, is_runtime)

_RETURN = "__return__"  # the scope slot a `return` writes

_BINOPS = {
    ast.Add: ("+", operator.add, "add"), ast.Sub: ("-", operator.sub, "sub"),
    ast.Mult: ("*", operator.mul, "mul"), ast.Div: ("/", operator.truediv, "truediv"),
    ast.FloorDiv: ("//", operator.floordiv, "floordiv"), ast.Mod: ("%", operator.mod, "mod"),
    ast.Pow: ("**", operator.pow, None), ast.BitAnd: ("&", operator.and_, "and_"),
    ast.BitOr: ("|", operator.or_, "or_"), ast.BitXor: ("^", operator.xor, "xor"),
    ast.LShift: ("<<", operator.lshift, "shl"), ast.RShift: (">>", operator.rshift, "shr"),
    ast.MatMult: ("@", operator.matmul, None),
}
_CMPOPS = {
    ast.Eq: ("==", operator.eq, "eq"), ast.NotEq: ("!=", operator.ne, "ne"),
    ast.Lt: ("<", operator.lt, "lt"), ast.LtE: ("<=", operator.le, "le"),
    ast.Gt: (">", operator.gt, "gt"), ast.GtE: (">=", operator.ge, "ge"),
    ast.Is: ("is", operator.is_, None), ast.IsNot: ("is not", operator.is_not, None),
    ast.In: ("in", lambda a, b: a in b, None), ast.NotIn: ("not in", lambda a, b: a not in b, None),
}

_UNSUPPORTED_EXPR = {
    ast.Lambda: "lambda expressions", ast.ListComp: "list comprehensions",
    ast.SetComp: "set comprehensions", ast.DictComp: "dict comprehensions",
    ast.GeneratorExp: "generator expressions", ast.Await: "await", ast.Yield: "yield",
    ast.YieldFrom: "yield from", ast.NamedExpr: "assignment expressions (:=)",
    ast.Set: "set literals",
}


def unwrap(x):
    """tl.constexpr(v) -> v; numpy scalars -> Python numbers."""
    if isinstance(x, core.constexpr):
        return unwrap(x.value)
    if type(x) in (tuple, list) and any(isinstance(e, core.constexpr) for e in x):
        return type(x)(unwrap(e) for e in x)
    if type(x).__module__ == "numpy" and hasattr(x, "item") and getattr(x, "ndim", None) == 0:
        return x.item()
    return x


def _kernel_function(fn):
    """The Python function of a @tessera.kernel (or of Triton-style wrappers with .fn),
    None for anything else."""
    inner = getattr(fn, "fn", None)
    return inner if inner is not None and inspect.isfunction(inner) and not isinstance(fn, type) else None


class Frame:
    """One function being compiled: the kernel, or a helper inlined into it."""

    def __init__(self, src, fn, scope, call_node, same_file):
        self.src = src                  # parsed source, shared by functions with one code object
        self.fn = fn                    # this function: its globals and closure cells
        self.scope = scope
        self.call_node = call_node      # the Call in the previous frame, None for the kernel
        self.same_file = same_file      # ops get locations in the kernel's file only
        self.partial = {}               # name -> why it is undefined here (see lookup)
        self.loop_depth = 0
        # From `fn`, not src.fn: closures made by one factory share a code object and so a
        # cached FunctionSource, but each has its own cells (and maybe globals).
        self.globals = fn.__globals__
        self.closure = {}
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    self.closure[name] = cell.cell_contents
                except ValueError:
                    pass


# Python builtins that mean something special inside kernels.
def _kernel_min(*args): ...
def _kernel_max(*args): ...
def _kernel_print(*args, **kwargs): ...
def _kernel_len(x): ...
def _kernel_isinstance(x, t): ...
def _kernel_abs(x): ...
def _kernel_int(x=0): ...
def _kernel_float(x=0.0): ...
def _kernel_bool(x=False): ...


_KERNEL_BUILTINS = {
    "min": _kernel_min, "max": _kernel_max, "print": _kernel_print, "len": _kernel_len,
    "isinstance": _kernel_isinstance, "abs": _kernel_abs, "int": _kernel_int,
    "float": _kernel_float, "bool": _kernel_bool, "range": core.range,
}


class CodeGenerator(StatementsMixin, ast.NodeVisitor):
    def __init__(self, fn, arg_types, constexprs, arg_attrs, options):
        self.options = dict(options or {})
        try:
            src = function_source(fn)
        except SourceUnavailable as e:
            raise CompilationError(str(e), kernel_name=getattr(fn, "__name__", "?")) from None
        self.kernel_name = src.name
        self.kernel_file = src.filename
        attrs = {"file": src.filename, "num_warps": int(self.options.get("num_warps", 4))}
        if self.options.get("num_stages") is not None:
            attrs["num_stages"] = int(self.options["num_stages"])
        if self.options.get("tma") is not None:  # sm_90a: TMA-filled wgmma rings (TESSERA_TMA)
            attrs["tma"] = int(self.options["tma"])
        if self.options.get("maxnreg") is not None:  # GPU: registers a thread at most (PTX .maxnreg)
            attrs["maxnreg"] = int(self.options["maxnreg"])
        if self.options.get("fp_fusion") is not None:  # GPU: a * b + c as one FMA (TESSERA_GPU_FP_FUSION)
            attrs["fp_fusion"] = int(self.options["fp_fusion"])
        self.module = Module(src.name, [], attrs)
        self.builder = IRBuilder(self.module)
        self.sem = Semantic(self.builder)
        self.frames = [Frame(src, fn, {}, None, True)]
        self.current_node = None
        self._bind_kernel_params(fn, src, arg_types or {}, constexprs or {}, arg_attrs or {})

    # ------------------------------------------------------------------ entry
    def _bind_kernel_params(self, fn, src, arg_types, constexprs, arg_attrs):
        scope = self.frame.scope
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise self.error(src.node, f"kernel parameters cannot be *args or **kwargs ('{p.name}')")
            if p.name in constexprs:
                scope[p.name] = unwrap(constexprs[p.name])
            elif p.name in arg_types:
                t = arg_types[p.name]
                if isinstance(t, str):
                    t = D.parse_signature_type(t)
                if not isinstance(t, D.dtype):
                    raise InternalCompilerError(f"arg_types['{p.name}'] is {t!r}, not a dtype",
                                                kernel_name=self.kernel_name)
                arg = KernelArg(p.name, IRType(t), arg_attrs.get(p.name))
                self.module.args.append(arg)
                scope[p.name] = Value(arg.value)
            elif p.default is not p.empty:
                scope[p.name] = unwrap(p.default)
            else:
                raise self.error(src.node, f"no type or value was given for kernel parameter '{p.name}'")

    def generate(self) -> Module:
        node = self.frame.src.node
        self.builder.loc = self.loc_of(node)
        self.visit_block(node.body)
        ret = self.frame.scope.get(_RETURN)
        if ret is not None:
            raise self.error(node, f"a kernel cannot return a value (it returns {describe(ret)}); "
                                   f"store results through a pointer")
        last = node.body[-1] if node.body else node
        self.builder.loc = self.loc_of(last)
        self.builder.create("return")
        return self.module

    # ------------------------------------------------------------------ frames, locations, errors
    @property
    def frame(self) -> Frame:
        return self.frames[-1]

    @property
    def scope(self):
        return self.frame.scope

    @scope.setter
    def scope(self, value):
        self.frame.scope = value

    def loc_of(self, node):
        line, col = self.frame.src.position(node)
        return (line, col + 1)

    def error(self, node, message) -> CompilationError:
        frame = self.frame
        src = frame.src
        line, col = src.position(node)
        stack = []
        for caller, callee in zip(self.frames[:-1], self.frames[1:]):
            cline, ccol = caller.src.position(callee.call_node)
            stack.append(CallSite(caller.src.name, caller.src.filename, cline, ccol,
                                  caller.src.source_line(cline), caller.src.end_column(callee.call_node)))
        return CompilationError(message, self.kernel_name, src.filename, line, col,
                                src.source_line(line), src.name, stack, src.end_column(node))

    def visit(self, node):
        has_pos = hasattr(node, "lineno")
        saved_loc, saved_node = self.builder.loc, self.current_node
        if has_pos:
            self.current_node = node
            if self.frame.same_file:
                self.builder.loc = self.loc_of(node)
        try:
            return super().visit(node)
        except (CompilationError, InternalCompilerError):
            raise
        except SemanticError as e:
            if not has_pos:
                raise
            raise self.error(node, str(e)) from None
        except RecursionError:
            raise self.error(node, "the kernel is nested too deeply (recursion limit reached)") from None
        except Exception as e:
            if not has_pos:
                raise
            src = self.frame.src
            line, col = src.position(node)
            raise InternalCompilerError(f"{type(e).__name__}: {e}", self.kernel_name, src.filename,
                                        line, col, src.source_line(line)) from e
        finally:
            self.builder.loc, self.current_node = saved_loc, saved_node

    def generic_visit(self, node):
        what = _UNSUPPORTED_EXPR.get(type(node), f"'{type(node).__name__}' syntax")
        raise self.error(node, f"unsupported syntax: {what} cannot be used in a kernel")

    def _python(self, node, fn, *args, what=None):
        """Run Python at compile time; its exceptions become CompilationErrors."""
        try:
            return unwrap(fn(*args))
        except (CompilationError, InternalCompilerError, SemanticError):
            raise
        except Exception as e:
            raise self.error(node, f"compile-time evaluation of {what or ast.unparse(node)} failed: "
                                   f"{type(e).__name__}: {e}") from None

    # ------------------------------------------------------------------ names
    def lookup(self, name, node):
        frame = self.frame
        if name in frame.scope:
            return frame.scope[name]
        if name in frame.partial:
            raise self.error(node, frame.partial[name])
        if name in frame.closure:
            return unwrap(frame.closure[name])
        if name in frame.globals:
            return unwrap(frame.globals[name])
        if name in _KERNEL_BUILTINS:
            return _KERNEL_BUILTINS[name]
        if hasattr(py, name):
            return getattr(py, name)
        raise self.error(node, f"name '{name}' is not defined")

    def visit_Name(self, node):
        return self.lookup(node.id, node)

    def visit_Constant(self, node):
        return node.value

    def visit_Tuple(self, node):
        return tuple(self._visit_elements(node.elts))

    def visit_List(self, node):
        return list(self._visit_elements(node.elts))

    def _visit_elements(self, elts):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                v = self.visit(e.value)
                if isinstance(v, (Value, BlockPointer)):
                    raise self.error(e, f"cannot unpack {describe(v)} with *")
                out.extend(v)
            else:
                out.append(self.visit(e))
        return out

    def visit_Dict(self, node):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(self.visit(v))
            else:
                out[self.visit(k)] = self.visit(v)
        return out

    def visit_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
                continue
            value = self.visit(v.value)
            if is_runtime(value):
                raise self.error(v, f"f-strings can only format compile-time values, not {describe(value)}; "
                                    f"use tl.device_print for run-time values")
            if v.conversion == ord("r"):
                value = repr(value)
            elif v.conversion == ord("s"):
                value = str(value)
            elif v.conversion == ord("a"):
                value = ascii(value)
            spec = self.visit(v.format_spec) if v.format_spec is not None else ""
            parts.append(self._python(v, format, value, spec))
        return "".join(parts)

    def visit_Slice(self, node):
        parts = [self.visit(p) if p is not None else None for p in (node.lower, node.upper, node.step)]
        for p in parts:
            if is_runtime(p):
                raise self.error(node, f"slice bounds must be compile-time constants, got {describe(p)}")
        return slice(*parts)

    # ------------------------------------------------------------------ operators
    def visit_BinOp(self, node):
        lhs, rhs = self.visit(node.left), self.visit(node.right)
        return self.binary_op(node, type(node.op), lhs, rhs)

    def binary_op(self, node, op_type, lhs, rhs):
        symbol, pyop, method = _BINOPS[op_type]
        if not is_runtime(lhs) and not is_runtime(rhs):
            return self._python(node, pyop, lhs, rhs)
        if isinstance(lhs, (tuple, list)) or isinstance(rhs, (tuple, list)):
            if op_type in (ast.Add, ast.Mult):  # tuple concatenation / repetition
                return self._python(node, pyop, lhs, rhs)
        if op_type is ast.Pow:
            raise self.error(node, f"operator ** is only supported between compile-time constants, "
                                   f"got {describe(lhs)} and {describe(rhs)}; use tl.exp/tl.log or "
                                   f"repeated multiplication")
        if op_type is ast.MatMult:
            return BUILTINS["dot"](self, lhs, rhs)
        for x in (lhs, rhs):
            if not (isinstance(x, Value) or is_number(x)):
                raise self.error(node, f"unsupported operand types for {symbol}: {describe(lhs)} and {describe(rhs)}")
        return getattr(self.sem, method)(lhs, rhs)

    def visit_UnaryOp(self, node):
        v = self.visit(node.operand)
        op = type(node.op)
        if not is_runtime(v):
            fn = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos,
                  ast.Invert: operator.invert}[op]
            return self._python(node, fn, v)
        if not isinstance(v, Value):
            raise self.error(node, f"unsupported operand type for unary operator: {describe(v)}")
        if op is ast.Not:
            return self.sem.logical_not(v)
        if op is ast.USub:
            return self.sem.neg(v)
        if op is ast.UAdd:
            return self.sem.pos(v)
        return self.sem.invert(v)

    def visit_Compare(self, node):
        operands = [self.visit(node.left)] + [self.visit(c) for c in node.comparators]
        if len(node.ops) > 1:
            if any(is_runtime(v) for v in operands):
                raise self.error(node, "chained comparisons (a < b < c) of tensors are not supported; "
                                       "write (a < b) & (b < c)")
            result = True
            for op, a, b in zip(node.ops, operands, operands[1:]):
                result = self._python(node, _CMPOPS[type(op)][1], a, b)
                if not result:
                    return result
            return result
        lhs, rhs = operands
        symbol, pyop, pred = _CMPOPS[type(node.ops[0])]
        if pred is None:  # is / is not / in / not in: compile-time identity and membership
            if symbol in ("in", "not in") and is_runtime(rhs):
                raise self.error(node, f"'{symbol}' needs a compile-time container, got {describe(rhs)}")
            return self._python(node, pyop, lhs, rhs)
        if not is_runtime(lhs) and not is_runtime(rhs):
            return self._python(node, pyop, lhs, rhs)
        for x in (lhs, rhs):
            if not (isinstance(x, Value) or is_number(x)):
                raise self.error(node, f"cannot compare {describe(lhs)} and {describe(rhs)} with {symbol}")
        return self.sem.cmp(pred, lhs, rhs)

    def visit_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        result = self.visit(node.values[0])
        for nxt in node.values[1:]:
            if not is_runtime(result):
                if bool(result) != is_and:  # short circuit, as Python
                    return result
                result = self.visit(nxt)
                continue
            rhs = self.visit(nxt)
            for x in (result, rhs):
                if not (isinstance(x, Value) or is_number(x)):
                    raise self.error(node, f"cannot use {describe(x)} with '{'and' if is_and else 'or'}'")
            result = self.sem.logical_and(result, rhs) if is_and else self.sem.logical_or(result, rhs)
        return result

    def visit_IfExp(self, node):
        cond = self.visit(node.test)
        if not is_runtime(cond):
            return self.visit(node.body if cond else node.orelse)
        cond = self.runtime_condition(cond, node.test, "a conditional expression (a if c else b)")
        return self.runtime_if_expr(cond, node)

    def runtime_condition(self, cond, node, what):
        if not isinstance(cond, Value):
            raise self.error(node, f"the condition of {what} must be a scalar, got {describe(cond)}")
        if cond.shape:
            raise self.error(node, f"the condition of {what} must be a scalar, but it is a tile "
                                   f"({describe(cond)}); use tl.where for an element-wise choice")
        return self.sem.to_bool(cond)

    # ------------------------------------------------------------------ subscripts and attributes
    def visit_Subscript(self, node):
        value = self.visit(node.value)
        index = self.visit(node.slice)
        if isinstance(value, Value):
            return self.tensor_subscript(node, value, index)
        if isinstance(value, BlockPointer):
            raise self.error(node, "block pointers cannot be indexed; use tl.load")
        if is_runtime(index):
            raise self.error(node, f"indexing with a tensor ({describe(index)}) is not supported; "
                                   f"indices must be compile-time constants")
        return self._python(node, operator.getitem, value, index)

    def tensor_subscript(self, node, value, index):
        items = index if isinstance(index, tuple) else (index,)
        n_slices = sum(1 for i in items if isinstance(i, slice))
        if Ellipsis in items:
            pos = items.index(Ellipsis)
            fill = len(value.shape) - n_slices
            items = items[:pos] + (slice(None),) * fill + items[pos + 1:]
            n_slices += fill
        if n_slices > len(value.shape):
            raise self.error(node, f"too many indices for {describe(value)}: {n_slices} slices for "
                                   f"{len(value.shape)} dimensions")
        axis = 0
        for item in items:
            if item is None:
                value = self.sem.expand_dims(value, axis)
                axis += 1
            elif isinstance(item, slice) and item == slice(None):
                axis += 1
            else:
                raise self.error(node, f"unsupported tensor index {item!r}: only None (new axis) and "
                                       f"':' are supported; use tl.load with pointers to gather")
        return value

    def visit_Attribute(self, node):
        obj = self.visit(node.value)
        attr = node.attr
        if isinstance(obj, Value):
            return self.tensor_attribute(node, obj, attr)
        if isinstance(obj, BlockPointer):
            raise self.error(node, f"block pointers have no attribute '{attr}'")
        try:
            return unwrap(getattr(obj, attr))
        except AttributeError:
            owner = f"module '{obj.__name__}'" if inspect.ismodule(obj) else describe(obj)
            raise self.error(node, f"{owner} has no attribute '{attr}'") from None

    def tensor_attribute(self, node, x, attr):
        if attr == "dtype":
            return x.dtype
        if attr == "shape":
            return ShapeTuple(x.shape)
        if attr == "type":
            return TileTypeInfo(x.dtype, x.shape) if x.shape else x.dtype
        if attr == "numel":
            return x.numel
        if attr == "ndim":
            return len(x.shape)
        if attr == "T":
            return BUILTINS["trans"](self, x)
        if attr in TENSOR_METHODS:
            return BoundMethod(x, TENSOR_METHODS[attr])
        raise self.error(node, f"tensor ({describe(x)}) has no attribute '{attr}'")

    # ------------------------------------------------------------------ calls
    def visit_Call(self, node):
        fn = self.visit(node.func)
        args = self._visit_elements(node.args)
        kwargs = {}
        for kw in node.keywords:
            value = self.visit(kw.value)
            if kw.arg is None:
                if not isinstance(value, dict):
                    raise self.error(kw, f"** needs a compile-time dict, got {describe(value)}")
                kwargs.update(value)
            else:
                kwargs[kw.arg] = value
        return self.call(node, fn, args, kwargs)

    def call(self, node, fn, args, kwargs):
        if isinstance(fn, BoundMethod):
            return self.call_builtin(node, fn.builtin_name, BUILTINS_SIGS[fn.builtin_name],
                                     [fn.receiver] + list(args), kwargs)
        name = getattr(fn, "__tessera_builtin__", None)
        if name is not None:
            return self.call_builtin(node, name, fn.__tessera_signature__, args, kwargs,
                                     fn.__tessera_qualified_name__)
        if isinstance(fn, (Value, BlockPointer)):
            raise self.error(node, f"{describe(fn)} is not callable")
        special = _SPECIAL_CALLS.get(id(fn))
        if special is not None:
            return special(self, node, args, kwargs)
        if isinstance(fn, type) and issubclass(fn, core.range):
            return self._python(node, lambda: fn(*args, **kwargs), what=f"{fn.__name__}(...)")
        if _kernel_function(fn) is not None:
            return self.call_function(fn, args, kwargs, node)  # another @tessera.kernel
        runtime_args = any(is_runtime(a) for a in list(args) + list(kwargs.values()))
        if inspect.isfunction(fn):
            if runtime_args or core._interpreter_impl is not None:
                return self.call_function(fn, args, kwargs, node)
            return self._call_python_or_inline(node, fn, args, kwargs)
        if not callable(fn):
            raise self.error(node, f"{describe(fn)} is not callable")
        fname = getattr(fn, "__name__", type(fn).__name__)
        if runtime_args:
            raise self.error(node, f"cannot call {fname}() with tensor arguments: inside a kernel only "
                                   f"tl builtins, @tessera.kernel functions and Python functions "
                                   f"(which are inlined) can take tensors")
        return self._python(node, lambda: fn(*args, **kwargs), what=f"{fname}(...)")

    def _call_python_or_inline(self, node, fn, args, kwargs):
        """A plain Python function called with compile-time arguments only runs as Python
        (as in Triton, e.g. a next_power_of_2 helper); if it turns out to use tl
        builtins, it is inlined instead."""
        try:
            return unwrap(fn(*args, **kwargs))
        except RuntimeError as e:
            if "can only be used inside a @tessera.kernel" in str(e):
                return self.call_function(fn, args, kwargs, node)
            raise self.error(node, f"compile-time call of {fn.__name__}() failed: RuntimeError: {e}") from None
        except (CompilationError, InternalCompilerError):
            raise
        except Exception as e:
            raise self.error(node, f"compile-time call of {fn.__name__}() failed: "
                                   f"{type(e).__name__}: {e}") from None

    def call_builtin(self, node, name, signature, args, kwargs, qualified_name=None):
        shown = qualified_name or f"tl.{name}"  # tl.extra.cuda.gdc_wait, ...
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            raise SemanticError(f"{shown}(): {e}") from None
        bound.apply_defaults()
        impl = BUILTINS.get(name)
        if impl is None:
            raise SemanticError(f"{shown} is not supported by the compiler yet")
        return impl(self, *bound.args, **bound.kwargs)

    def call_function(self, fn, args, kwargs, call_node=None):
        """Inline a Python function (or a @tessera.kernel's function): bind its parameters
        in a new scope, compile its body at the current insertion point and return what
        it returns."""
        fn = _kernel_function(fn) or fn
        call_node = call_node if call_node is not None else self._current_call_node
        if any(f.fn.__code__ is fn.__code__ for f in self.frames):
            raise self.error(call_node, f"recursive call of {fn.__name__}() is not supported")
        try:
            src = function_source(fn)
        except SourceUnavailable as e:
            raise self.error(call_node, str(e)) from None
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            raise self.error(call_node, f"{fn.__name__}(): {e}") from None
        bound.apply_defaults()
        scope = {}
        params = src.node.args
        constexpr_params = {a.arg for a in params.args + params.kwonlyargs + params.posonlyargs
                            if self._is_constexpr_annotation(fn, a.annotation)}
        for pname, value in bound.arguments.items():
            value = unwrap(value)
            if pname in constexpr_params and is_runtime(value):
                raise self.error(call_node, f"{fn.__name__}(): parameter '{pname}' is a tl.constexpr "
                                            f"but got {describe(value)}")
            scope[pname] = value
        frame = Frame(src, fn, scope, call_node, same_file=src.filename == self.kernel_file)
        self.frames.append(frame)
        try:
            self.visit_block(src.node.body)
        finally:
            self.frames.pop()
        if _RETURN not in frame.scope and _RETURN in frame.partial:
            raise self.error(call_node, f"{fn.__name__}() returns a value on some paths but not on "
                                        f"others; every path must return")
        return frame.scope.get(_RETURN)

    def _is_constexpr_annotation(self, fn, ann):
        if ann is None:
            return False
        text = ast.unparse(ann)
        return text.endswith("constexpr")

    @property
    def _current_call_node(self):
        return self.current_node or self.frame.src.node


# --------------------------------------------------------------------------- Python builtins in kernels

def _special_min_max(is_min):
    def impl(cg, node, args, kwargs):
        if kwargs:
            raise cg.error(node, f"{'min' if is_min else 'max'}() takes no keyword arguments in a kernel")
        if len(args) == 1 and not is_runtime(args[0]):
            args = list(args[0])
        if not any(is_runtime(a) for a in args):
            return cg._python(node, py.min if is_min else py.max, *args)
        if len(args) < 2:
            raise cg.error(node, "min()/max() of a single tensor: use tl.min/tl.max to reduce")
        result = args[0]
        for a in args[1:]:
            result = cg.sem.minimum(result, a) if is_min else cg.sem.maximum(result, a)
        return result
    return impl


def _special_print(cg, node, args, kwargs):
    prefix_parts = []
    values = list(args)
    while values and not is_runtime(values[0]):
        prefix_parts.append(str(values.pop(0)))
    if not values:
        py.print(*prefix_parts)  # nothing run-time: print while compiling, as static_print
        return None
    prefix = " ".join(prefix_parts)
    return BUILTINS["device_print"](cg, prefix, *values)


def _special_len(cg, node, args, kwargs):
    (x,) = args
    if isinstance(x, Value):
        if not x.shape:
            raise cg.error(node, f"len() of a scalar ({describe(x)})")
        return x.shape[0]
    return cg._python(node, py.len, x)


def _special_isinstance(cg, node, args, kwargs):
    x, t = args
    if t is core.constexpr or (isinstance(t, tuple) and core.constexpr in t):
        if not is_runtime(x):
            return True
        t = tuple(c for c in t if c is not core.constexpr) if isinstance(t, tuple) else ()
    return py.isinstance(x, t)


def _special_abs(cg, node, args, kwargs):
    (x,) = args
    if is_runtime(x):
        return BUILTINS["abs"](cg, x)
    return cg._python(node, py.abs, x)


def _special_conversion(pytype):
    def impl(cg, node, args, kwargs):
        if any(is_runtime(a) for a in args):
            target = {py.int: "tl.int32", py.float: "tl.float32", py.bool: "tl.int1"}[pytype]
            raise cg.error(node, f"{pytype.__name__}() of a tensor is not supported; use "
                                 f"x.to({target})")
        return cg._python(node, lambda: pytype(*args, **kwargs), what=f"{pytype.__name__}(...)")
    return impl


_SPECIAL_CALLS = {
    id(_kernel_min): _special_min_max(True), id(_kernel_max): _special_min_max(False),
    id(_kernel_print): _special_print, id(_kernel_len): _special_len,
    id(_kernel_isinstance): _special_isinstance, id(_kernel_abs): _special_abs,
    id(_kernel_int): _special_conversion(py.int), id(_kernel_float): _special_conversion(py.float),
    id(_kernel_bool): _special_conversion(py.bool),
}

# Signatures for tensor methods come from the builtins themselves.
BUILTINS_SIGS = {}
for _n in dir(core):
    _obj = getattr(core, _n)
    if core.is_builtin(_obj):
        BUILTINS_SIGS[_obj.__tessera_builtin__] = _obj.__tessera_signature__


# --------------------------------------------------------------------------- public API

def generate_tile_ir_module(fn, arg_types, constexprs=None, arg_attrs=None, options=None) -> Module:
    return CodeGenerator(fn, arg_types, constexprs, arg_attrs, options).generate()


def generate_tile_ir(fn, arg_types, constexprs=None, arg_attrs=None, options=None) -> str:
    """The Tile IR text (docs/tile_ir.md) of kernel `fn` specialized for the given
    argument types, constexpr values, per-argument attributes and options."""
    return print_module(generate_tile_ir_module(fn, arg_types, constexprs, arg_attrs, options))
