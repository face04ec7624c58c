"""Loop-carried Python numbers become tensors in the interpreter, as in compiled code.

The code generator carries every variable a run-time loop assigns through the loop as
a typed value: `c = 0; for _ in range(n): c += 1` makes `c` an i32 (a Python float an
f32), so `c.to(tl.float32)`, `c // 2` (truncating) and overflow behave as i32. Run as
plain Python, `c` would stay a Python int. So the interpreter runs a copy of the kernel
function whose run-time loops are preceded by a conversion of those variables:

    it = range(n)                          for _ in range(n):
    if _is_runtime_loop(it):         <-        c += 1
        c = _carry(c)  (if bound)
    for _ in it: ...

A run-time loop is `range(...)`/`tl.range(...)` (not tl.static_range), or a `while`
whose condition calls something or reads a tensor (the compiled rule for a static
`while`). Only the kernel function itself is rewritten (helpers it calls run as they
are, as inlined code they are rare carriers), and only when its source is available.
"""
from __future__ import annotations

import ast
import inspect
import itertools
import textwrap
import types as pytypes

from ..compiler.source import assigned_names, has_call, names_read
from ..language import core
from .values import Tensor, is_weak, to_tensor, unwrap

_counter = itertools.count()


def _is_runtime_loop(iterable) -> bool:
    return isinstance(iterable, core.range) and not isinstance(iterable, core.static_range)


def _reads_tensor(*values) -> bool:
    return any(isinstance(unwrap(v), Tensor) for v in values)


def _carry(value):
    """A Python number carried by a run-time loop: the typed scalar the compiled loop has."""
    if is_weak(unwrap(value)):
        return to_tensor(value)
    return value


def _carry_statements(names, lineno):
    stmts = []
    for name in names:
        src = f"try:\n    {name} = __tessera_carry__({name})\nexcept NameError:\n    pass\n"
        stmts += ast.parse(src).body
    for s in stmts:
        for node in ast.walk(s):
            if hasattr(node, "lineno"):
                node.lineno = node.end_lineno = lineno
    return stmts


class _CarryRewriter(ast.NodeTransformer):
    def visit_FunctionDef(self, node):
        if getattr(self, "_in_kernel", False):
            return node                   # nested functions (combine fns) are not loops' bodies
        self._in_kernel = True
        node.decorator_list = []
        self.generic_visit(node)
        return node

    def _rewrite_body(self, stmts):
        out = []
        for s in stmts:
            s = self.visit(s)
            out += s if isinstance(s, list) else [s]
        return out

    def visit_For(self, node):
        node.body = self._rewrite_body(node.body)
        node.orelse = self._rewrite_body(node.orelse)
        targets = {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        names = [n for n in assigned_names(node.body) if n not in targets]
        if not names:
            return node
        it = f"__tessera_iter_{next(_counter)}__"
        assign = ast.Assign(targets=[ast.Name(it, ast.Store())], value=node.iter)
        test = ast.parse(f"__tessera_is_runtime_loop__({it})", mode="eval").body
        guard = ast.If(test=test, body=_carry_statements(names, node.lineno), orelse=[])
        node.iter = ast.Name(it, ast.Load())
        new = [assign, guard, node]
        for s in new:
            ast.copy_location(s, node)
            ast.fix_missing_locations(s)
        return new

    def visit_While(self, node):
        node.body = self._rewrite_body(node.body)
        names = list(assigned_names(node.body))
        if not names:
            return node
        if has_call(node.test):
            body = _carry_statements(names, node.lineno)
        else:
            read = sorted(names_read(node.test))
            probe = "__tessera_reads_tensor__(" + ", ".join(f"locals().get({n!r})" for n in read) + ")"
            test = ast.parse(probe, mode="eval").body
            body = [ast.If(test=test, body=_carry_statements(names, node.lineno), orelse=[])]
        new = body + [node]
        for s in new:
            ast.copy_location(s, node)
            ast.fix_missing_locations(s)
        return new


def with_carried_numbers_as_tensors(fn, env: dict):
    """A copy of kernel function `fn` (globals `env`) with its run-time loops' Python
    numbers carried as tensors; `fn` unchanged (as a copy with globals `env`) when its
    source cannot be read."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    if not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        return None
    tree = _CarryRewriter().visit(tree)
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, first - 1)
    env = dict(env)
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            env[name] = cell.cell_contents
        except ValueError:           # an empty cell: the name is not bound yet
            return None
    env.update(__tessera_carry__=_carry, __tessera_is_runtime_loop__=_is_runtime_loop,
               __tessera_reads_tensor__=_reads_tensor)
    exec(compile(tree, fn.__code__.co_filename, "exec"), env)
    out = env[tree.body[0].name]
    if not isinstance(out, pytypes.FunctionType):
        return None
    out.__defaults__, out.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    return out
