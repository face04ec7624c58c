"""The statement half of the code generator: assignments, `if`/`for`/`while` (as IR
regions with yielded values), early returns, asserts.

Variables flowing through control flow. A variable assigned inside a region (a loop
body, a branch of a run-time `if`) and defined before it becomes a result of the
region's op: its value is *flattened* into IR leaves (a Value is one leaf, a block
pointer is its base/shape/strides/offsets, a tuple is its elements' leaves; Python
numbers are materialized as constants; other compile-time objects must not change).
A `Template` remembers the structure and the leaf types so the values can be
re-assembled from region arguments and op results.
"""
from __future__ import annotations

import ast

from ..language import core
from ..language import semantics as S
from .ir_builder import IRType, Region, replace_uses
from .source import (assigned_names, has_call, last_assignment, names_read,
                     restructure_early_returns)
from .values import BlockPointer, Value, describe, is_number, is_runtime

_RETURN = "__return__"
_MAX_STATIC_ITERATIONS = 1 << 16


class _Mismatch(Exception):
    """A value does not fit its template; the message says how (caught and reported
    with the variable name and the statement)."""


class Template:
    """Structure of a carried value: ('leaf', IRType) | ('bp', proto, n) |
    ('tuple', [Template]) | ('const', value)."""

    def __init__(self, kind, data):
        self.kind, self.data = kind, data

    def leaf_types(self):
        if self.kind == "leaf":
            return [self.data]
        if self.kind == "bp":
            return [v.type for v in self.data.leaves()]
        if self.kind == "tuple":
            return [t for sub in self.data for t in sub.leaf_types()]
        return []

    def rebuild(self, leaves):
        """leaves: an iterator of Values."""
        if self.kind == "leaf":
            return next(leaves)
        if self.kind == "bp":
            return self.data.rebuild([next(leaves) for _ in self.data.leaves()])
        if self.kind == "tuple":
            return tuple(t.rebuild(leaves) for t in self.data)
        return self.data

    def describe(self):
        if self.kind == "leaf":
            return str(self.data)
        if self.kind == "bp":
            return self.data.type_str()
        if self.kind == "tuple":
            return "(" + ", ".join(t.describe() for t in self.data) + ")"
        return describe(self.data)


def _same_constant(a, b):
    return type(a) is type(b) and (a is b or (a == b) is True)


def _prune_invariant_carries(op, regions, yield_op, init, n_fixed):
    """Drop the carried values a loop body yields back unchanged (for example the base,
    shape and strides of an advanced block pointer): their region arguments and results
    become the initial values. Returns one Value per original carried slot. `regions` are
    the loop's regions, each with one argument per carried value after `n_fixed` leading
    ones (the induction variable of a `for`)."""
    body_args = regions[-1].args[len(regions[-1].args) - len(init):]
    invariant = [y is a for y, a in zip(yield_op.operands, body_args)]
    if not any(invariant):
        return [Value(r) for r in op.results]
    mapping = {}
    for region in regions:
        offset = len(region.args) - len(init)
        for k, inv in enumerate(invariant):
            if inv:
                mapping[id(region.args[offset + k])] = init[k].handle
        region.args = region.args[:offset] + [a for a, inv in zip(region.args[offset:], invariant) if not inv]
    for region in regions:
        replace_uses(region, mapping)
    # the condition of a `while` forwards its carried values too
    for region in regions[:-1]:
        cond_op = region.ops[-1]
        cond_op.operands = cond_op.operands[:1] + [v for v, inv in zip(cond_op.operands[1:], invariant) if not inv]
    yield_op.operands = [v for v, inv in zip(yield_op.operands, invariant) if not inv]
    fixed = op.operands[:n_fixed]
    op.operands = fixed + [v for v, inv in zip(op.operands[n_fixed:], invariant) if not inv]
    values = [init[k] if inv else Value(r) for k, (inv, r) in enumerate(zip(invariant, op.results))]
    op.results = [r for r, inv in zip(op.results, invariant) if not inv]
    return values


class StatementsMixin:
    # ------------------------------------------------------------------ blocks
    def visit_block(self, stmts):
        """Compile statements in the current scope; True when a `return` ended them."""
        for stmt in restructure_early_returns(stmts):
            self.visit(stmt)
            if isinstance(stmt, ast.Return):
                return True
        return False

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.visit(node.value)

    def visit_Pass(self, node):
        pass

    def _unsupported_stmt(what):
        def visit(self, node):
            raise self.error(node, f"unsupported syntax: {what} is not supported in kernels")
        return visit

    visit_Break = _unsupported_stmt("'break'")
    visit_Continue = _unsupported_stmt("'continue'")
    visit_With = _unsupported_stmt("'with'")
    visit_AsyncWith = _unsupported_stmt("'async with'")
    visit_Try = _unsupported_stmt("'try'")
    visit_Raise = _unsupported_stmt("'raise' (use tl.static_assert or tl.device_assert)")
    visit_Global = _unsupported_stmt("'global'")
    visit_Nonlocal = _unsupported_stmt("'nonlocal'")
    visit_Import = _unsupported_stmt("'import' (import at module level)")
    visit_ImportFrom = _unsupported_stmt("'from ... import' (import at module level)")
    visit_ClassDef = _unsupported_stmt("a class definition")
    visit_FunctionDef = _unsupported_stmt("a nested function definition (define helpers at module level)")
    visit_AsyncFunctionDef = _unsupported_stmt("'async def'")
    visit_AsyncFor = _unsupported_stmt("'async for'")
    visit_Match = _unsupported_stmt("'match'")
    if hasattr(ast, "TryStar"):
        visit_TryStar = _unsupported_stmt("'try'")

    # ------------------------------------------------------------------ assignment
    def set_var(self, name, value):
        self.scope[name] = value
        self.frame.partial.pop(name, None)

    def assign(self, target, value, node):
        if isinstance(target, ast.Name):
            self.set_var(target.id, value)
            return
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, Value):
                raise self.error(target, f"cannot unpack a tensor ({describe(value)}) into "
                                         f"{len(target.elts)} names; use tl.split")
            if isinstance(value, BlockPointer) or not hasattr(value, "__iter__"):
                raise self.error(target, f"cannot unpack {describe(value)}")
            items = list(value)
            stars = [i for i, t in enumerate(target.elts) if isinstance(t, ast.Starred)]
            if stars:
                i = stars[0]
                n_after = len(target.elts) - i - 1
                if len(items) < len(target.elts) - 1:
                    raise self.error(target, f"cannot unpack {len(items)} values into "
                                             f"{len(target.elts)} names")
                items = items[:i] + [tuple(items[i:len(items) - n_after])] + items[len(items) - n_after:]
                targets = [t.value if isinstance(t, ast.Starred) else t for t in target.elts]
            else:
                targets = target.elts
            if len(items) != len(targets):
                raise self.error(target, f"cannot unpack {len(items)} value(s) into {len(targets)} names")
            for t, v in zip(targets, items):
                self.assign(t, v, node)
            return
        if isinstance(target, ast.Subscript):
            raise self.error(target, "assignment to a subscript (x[...] = ...) is not supported: "
                                     "tensors are immutable; build a new one (e.g. with tl.where)")
        if isinstance(target, ast.Attribute):
            raise self.error(target, "assignment to an attribute is not supported in kernels")
        raise self.error(target, f"unsupported assignment target: {type(target).__name__}")

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value, node)

    def visit_AnnAssign(self, node):
        if node.value is None:
            return
        value = self.visit(node.value)
        if ast.unparse(node.annotation).endswith("constexpr") and is_runtime(value):
            raise self.error(node.value, f"a tl.constexpr variable needs a compile-time value, "
                                         f"got {describe(value)}")
        self.assign(node.target, value, node)

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            self.assign(node.target, None, node)  # reports the unsupported target
        current = self.lookup(node.target.id, node.target)
        value = self.visit(node.value)
        self.set_var(node.target.id, self.binary_op(node, type(node.op), current, value))

    def visit_Delete(self, node):
        for t in node.targets:
            if not isinstance(t, ast.Name):
                raise self.error(t, "only names can be deleted")
            self.scope.pop(t.id, None)

    # ------------------------------------------------------------------ return / assert
    def visit_Return(self, node):
        if self.frame.loop_depth > 0:
            raise self.error(node, "'return' inside a loop is not supported")
        value = self.visit(node.value) if node.value is not None else None
        self.set_var(_RETURN, value)

    def visit_Assert(self, node):
        test = self.visit(node.test)
        msg = self.visit(node.msg) if node.msg is not None else None
        if is_runtime(msg):
            raise self.error(node.msg, f"an assert message must be a compile-time string, got {describe(msg)}")
        text = str(msg) if msg is not None else f"Assertion `{ast.unparse(node.test)}` failed"
        if not is_runtime(test):
            if not test:
                raise self.error(node, "static assertion failed: " +
                                 (str(msg) if msg is not None else ast.unparse(node.test)))
            return
        if self.options.get("debug", False):
            self.sem.device_assert(test, text)

    # ------------------------------------------------------------------ templates
    def template_of(self, value):
        """(Template, leaves) for a value entering a loop; numbers become constants."""
        if isinstance(value, Value):
            return Template("leaf", value.type), [value]
        if is_number(value):
            v = self.sem.to_value(value)
            return Template("leaf", v.type), [v]
        if isinstance(value, BlockPointer):
            return Template("bp", value), value.leaves()
        if isinstance(value, tuple):
            subs, leaves = [], []
            for v in value:
                t, ls = self.template_of(v)
                subs.append(t)
                leaves += ls
            return Template("tuple", subs), leaves
        return Template("const", value), []

    def join_templates(self, a, b):
        """A template both a and b fit (for the two branches of an `if`)."""
        if isinstance(a, Value) and isinstance(b, Value):
            if a.type != b.type:
                raise _Mismatch(f"{describe(a)} and {describe(b)}")
            return Template("leaf", a.type)
        if isinstance(a, Value) and is_number(b) or is_number(a) and isinstance(b, Value):
            v, n = (a, b) if isinstance(a, Value) else (b, a)
            if v.shape or (isinstance(n, float) and not v.dtype.is_floating()):
                raise _Mismatch(f"{describe(a)} and {describe(b)}")
            return Template("leaf", v.type)
        if is_number(a) and is_number(b):
            if _same_constant(a, b):
                return Template("const", a)
            t = S.computation_type(S.literal_type(a), False, S.literal_type(b), False)
            return Template("leaf", IRType(t))
        if isinstance(a, BlockPointer) and isinstance(b, BlockPointer):
            if a.block_shape != b.block_shape or a.base.dtype != b.base.dtype:
                raise _Mismatch(f"{describe(a)} and {describe(b)}")
            return Template("bp", a)
        if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
            return Template("tuple", [self.join_templates(x, y) for x, y in zip(a, b)])
        if not is_runtime(a) and not is_runtime(b) and _same_constant(a, b):
            return Template("const", a)
        raise _Mismatch(f"{describe(a)} and {describe(b)}")

    def leaves_for(self, template, value):
        """The IR leaves of `value` in `template`'s layout (numbers become constants of
        the template's type); _Mismatch when it does not fit."""
        kind = template.kind
        if kind == "leaf":
            t = template.data
            if isinstance(value, Value):
                if value.type != t:
                    raise _Mismatch(f"{t} before and {describe(value)} after")
                return [value]
            if is_number(value):
                if t.shape or isinstance(value, float) and not t.dtype.is_floating():
                    raise _Mismatch(f"{t} before and the float constant {value!r} after")
                return [self.sem.const(value, t.dtype, t.shape)]
            raise _Mismatch(f"{t} before and {describe(value)} after")
        if kind == "bp":
            proto = template.data
            if not isinstance(value, BlockPointer) or value.block_shape != proto.block_shape:
                raise _Mismatch(f"{proto.type_str()} before and {describe(value)} after")
            return value.leaves()
        if kind == "tuple":
            if not isinstance(value, tuple) or len(value) != len(template.data):
                raise _Mismatch(f"{template.describe()} before and {describe(value)} after")
            return [leaf for t, v in zip(template.data, value) for leaf in self.leaves_for(t, v)]
        if is_runtime(value) or not _same_constant(template.data, value):
            raise _Mismatch(f"the compile-time value {describe(template.data)} before and "
                            f"{describe(value)} after")
        return []

    # ------------------------------------------------------------------ if
    def visit_If(self, node):
        cond = self.visit(node.test)
        if not is_runtime(cond):
            self.visit_block(node.body if cond else node.orelse)
            return
        cond = self.runtime_condition(cond, node.test, "an if statement")
        self.runtime_if(cond, node)

    def _visit_branch(self, region, stmts, outer):
        with self.builder.at_end_of(region):
            self.scope = dict(outer)
            self.visit_block(stmts)
            result = self.scope
        self.scope = outer
        return result

    def runtime_if(self, cond, node):
        outer = self.scope
        then_region, else_region = Region(), Region()
        then_scope = self._visit_branch(then_region, node.body, outer)
        else_scope = self._visit_branch(else_region, node.orelse, outer)
        names, templates = [], []
        for name in list(dict.fromkeys(list(then_scope) + list(else_scope))):
            if name not in then_scope or name not in else_scope:
                if name in outer:
                    outer.pop(name)  # deleted in one branch
                where = "the then-branch" if name in then_scope else "the else-branch"
                line = self.frame.src.position(node)[0]
                self.frame.partial[name] = (
                    f"'{name}' is assigned only in {where} of the if at line {line}, so it is not "
                    f"defined after it; assign it in both branches or before the if")
                continue
            a, b = then_scope[name], else_scope[name]
            if a is b or (not is_runtime(a) and not is_runtime(b) and _same_constant(a, b)):
                outer[name] = a
                continue
            try:
                templates.append(self.join_templates(a, b))
            except _Mismatch:
                raise self.error(node, f"variable '{name}' has type {describe(a)} in the then-branch "
                                       f"but {describe(b)} in the else-branch of this if; both "
                                       f"branches must give it the same type") from None
            names.append(name)
        results = self._finish_if(cond, then_region, else_region, templates,
                                  [then_scope[n] for n in names], [else_scope[n] for n in names])
        for name, value in zip(names, results):
            outer[name] = value
        self.scope = outer

    def _finish_if(self, cond, then_region, else_region, templates, then_values, else_values):
        """Yield the values from each branch and create the `if` op; returns the merged
        values rebuilt from the op's results."""
        if not templates and not then_region.ops and not else_region.ops:
            return []  # nothing happens in either branch: no `if` at all
        for region, values in ((then_region, then_values), (else_region, else_values)):
            with self.builder.at_end_of(region):
                leaves = [leaf for t, v in zip(templates, values) for leaf in self.leaves_for(t, v)]
                self.builder.create("yield", [v.handle for v in leaves])
        types = [t for tpl in templates for t in tpl.leaf_types()]
        op = self.builder.create("if", [cond.handle], types, regions=[then_region, else_region])
        it = iter(Value(r) for r in op.results)
        return [t.rebuild(it) for t in templates]

    def runtime_if_expr(self, cond, node):
        then_region, else_region = Region(), Region()
        with self.builder.at_end_of(then_region):
            a = self.visit(node.body)
        with self.builder.at_end_of(else_region):
            b = self.visit(node.orelse)
        if not is_runtime(a) and not is_runtime(b) and _same_constant(a, b):
            then_region.ops.append(self.builder.create("yield", insert=False))
            else_region.ops.append(self.builder.create("yield", insert=False))
            return a
        try:
            template = self.join_templates(a, b)
        except _Mismatch:
            raise self.error(node, f"the two values of this conditional expression have different "
                                   f"types: {describe(a)} and {describe(b)}") from None
        return self._finish_if(cond, then_region, else_region, [template], [a], [b])[0]

    # ------------------------------------------------------------------ loops
    def _loop_hints(self, rng, where):
        """The for op's attributes from tl.range's hints: warp_specialize and ping_pong
        (compile-time bools; ping_pong only with warp_specialize), num_stages (>= 0: this loop's GPU ring depth; 0, 1: no ring),
        l2_prefetch (>= 0: iterations ahead of a TMA ring the L2 is asked for its boxes; 0: not) and
        loop_unroll_factor (>= 1: LLVM unrolls by it, 1: never)."""
        attrs = {}
        for name, lowest in (("warp_specialize", None), ("ping_pong", None), ("num_stages", 0),
                             ("l2_prefetch", 0), ("loop_unroll_factor", 1)):
            v = getattr(rng, name)
            v = v.value if isinstance(v, core.constexpr) else v
            if lowest is None:  # a bool
                if is_runtime(v) or not isinstance(v, (bool, int)):
                    raise self.error(where, f"tl.range's {name} must be a compile-time bool, got {describe(v)}")
                if v:
                    attrs[name] = 1
            elif v is not None:
                if is_runtime(v) or not isinstance(v, int) or isinstance(v, bool) or v < lowest:
                    raise self.error(where, f"tl.range's {name} must be a compile-time integer >= {lowest}, got "
                                            f"{describe(v)}")
                attrs[name] = v
        if "ping_pong" in attrs and "warp_specialize" not in attrs:
            raise self.error(where, "tl.range's ping_pong=True needs warp_specialize=True (the two consumer "
                                    "warpgroups that take turns are the specialized loop's)")
        return attrs

    def visit_For(self, node):
        if node.orelse:
            raise self.error(node, "unsupported syntax: 'for ... else' is not supported in kernels")
        iterable = self.visit(node.iter)
        if isinstance(iterable, core.static_range):
            bounds = [iterable.start, iterable.end, iterable.step]
            for b in bounds:
                if is_runtime(b) or not isinstance(b, int):
                    raise self.error(node.iter, f"tl.static_range bounds must be compile-time "
                                                f"integers, got {describe(b)}")
            return self.static_for(node, range(*bounds))
        if isinstance(iterable, core.range):
            return self.runtime_for(node, iterable)
        if isinstance(iterable, (Value, BlockPointer)):
            raise self.error(node.iter, f"cannot iterate over a tensor ({describe(iterable)}); "
                                        f"use range(...) and index with pointers")
        if not hasattr(iterable, "__iter__"):
            raise self.error(node.iter, f"cannot iterate over {describe(iterable)}")
        return self.static_for(node, list(iterable))

    def static_for(self, node, items):
        """Unrolled at compile time: the body is compiled once per item."""
        self.frame.loop_depth += 1
        try:
            for item in items:
                self.assign(node.target, item, node)
                self.visit_block(node.body)
        finally:
            self.frame.loop_depth -= 1

    def _carried(self, body, exclude=()):
        assigned = assigned_names(body)
        carried = [n for n in assigned if n in self.scope and n not in exclude]
        local_only = {n: assigned[n] for n in assigned if n not in self.scope and n not in exclude}
        return carried, local_only

    def _carry_in(self, names):
        templates, leaves = [], []
        for name in names:
            t, ls = self.template_of(self.scope[name])
            templates.append(t)
            leaves += ls
        return templates, leaves

    def _carry_out(self, node, names, templates, loop_kind):
        leaves = []
        for name, t in zip(names, templates):
            if name not in self.scope:
                raise self.error(node, f"loop-carried variable '{name}' is deleted inside the loop")
            try:
                leaves += self.leaves_for(t, self.scope[name])
            except _Mismatch as e:
                site = last_assignment(node.body, name)
                where = f" (assigned at line {self.frame.src.position(site)[0]})" if site else ""
                raise self.error(node, f"loop-carried variable '{name}' changes type in the {loop_kind} "
                                       f"loop: {e} one iteration of the body{where}; a variable "
                                       f"carried across iterations must keep its type (cast it "
                                       f"with .to(...))") from None
        return leaves

    def _mark_loop_locals(self, node, local_only):
        line = self.frame.src.position(node)[0]
        for name in local_only:
            if name == _RETURN:
                continue
            self.frame.partial[name] = (
                f"'{name}' is first assigned inside the loop at line {line}, so it is not defined "
                f"after the loop; give it a value before the loop to carry it out")

    def _loop_bound(self, x, node):
        if isinstance(x, Value):
            if x.shape or not x.dtype.is_int() or x.dtype.is_bool():
                raise self.error(node.iter, f"loop bounds must be integer scalars, got {describe(x)}")
            return x
        if isinstance(x, int) and not isinstance(x, bool):
            return x
        raise self.error(node.iter, f"loop bounds must be integers, got {describe(x)}")

    def runtime_for(self, node, rng):
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "the target of a run-time for loop must be a single name")
        lb, ub, step = (self._loop_bound(x, node) for x in (rng.start, rng.end, rng.step))
        negative = False
        if isinstance(step, int):
            if step == 0:
                raise self.error(node.iter, "the step of a loop cannot be 0")
            if step < 0:  # iterate iv' over [ub, lb) and use lb + ub - iv', as Triton
                negative, lb, ub, step = True, ub, lb, -step
        iv_type = None
        for x in (lb, ub, step):
            t = x.dtype if isinstance(x, Value) else S.literal_type(x)
            iv_type = t if iv_type is None else S.integer_promote(iv_type, t)
        lb, ub, step = (self.sem.cast(x, iv_type) for x in (lb, ub, step))

        target = node.target.id
        carried, local_only = self._carried(node.body, exclude=(target,))
        templates, init = self._carry_in(carried)
        region = Region([IRType(iv_type)] + [v.type for v in init])
        loop_attrs = self._loop_hints(rng, node.iter)
        op = self.builder.create("for", [lb.handle, ub.handle, step.handle] + [v.handle for v in init],
                                 [v.type for v in init], regions=[region], attrs=loop_attrs or None)
        outer = self.scope
        with self.builder.at_end_of(region):
            self.scope = dict(outer)
            iv = Value(region.args[0])
            if negative:
                iv = self.sem.sub(self.sem.add(lb, ub), iv)
            self.set_var(target, iv)
            args = iter(Value(a) for a in region.args[1:])
            for name, t in zip(carried, templates):
                self.scope[name] = t.rebuild(args)
            self.frame.loop_depth += 1
            try:
                self.visit_block(node.body)
            finally:
                self.frame.loop_depth -= 1
            leaves = self._carry_out(node, carried, templates, "for")
            yield_op = self.builder.create("yield", [v.handle for v in leaves])
        self.scope = outer
        results = iter(_prune_invariant_carries(op, [region], yield_op, init, n_fixed=3))
        for name, t in zip(carried, templates):
            outer[name] = t.rebuild(results)
        self._mark_loop_locals(node, local_only)

    def visit_While(self, node):
        if node.orelse:
            raise self.error(node, "unsupported syntax: 'while ... else' is not supported in kernels")
        if self._is_static_test(node.test):
            return self.static_while(node)
        carried, local_only = self._carried(node.body)
        templates, init = self._carry_in(carried)
        types = [v.type for v in init]
        before, after = Region(types), Region(types)
        op = self.builder.create("while", [v.handle for v in init], types, regions=[before, after])
        outer = self.scope
        with self.builder.at_end_of(before):
            self.scope = dict(outer)
            args = iter(Value(a) for a in before.args)
            for name, t in zip(carried, templates):
                self.scope[name] = t.rebuild(args)
            cond = self.visit(node.test)
            if not is_runtime(cond):
                raise self.error(node.test, "this while loop's condition is a compile-time constant "
                                            "but the loop changes run-time values; 'break' is not "
                                            "supported, so the loop could never end")
            cond = self.runtime_condition(cond, node.test, "a while loop")
            self.builder.create("condition", [cond.handle] + [a for a in before.args])
        with self.builder.at_end_of(after):
            self.scope = dict(outer)
            args = iter(Value(a) for a in after.args)
            for name, t in zip(carried, templates):
                self.scope[name] = t.rebuild(args)
            self.frame.loop_depth += 1
            try:
                self.visit_block(node.body)
            finally:
                self.frame.loop_depth -= 1
            leaves = self._carry_out(node, carried, templates, "while")
            yield_op = self.builder.create("yield", [v.handle for v in leaves])
        self.scope = outer
        results = iter(_prune_invariant_carries(op, [before, after], yield_op, init, n_fixed=0))
        for name, t in zip(carried, templates):
            outer[name] = t.rebuild(results)
        self._mark_loop_locals(node, local_only)

    def _is_static_test(self, test):
        """A while condition that reads only compile-time variables and calls nothing is
        evaluated (and the loop unrolled) at compile time."""
        if has_call(test):
            return False
        for name in names_read(test):
            if name in self.scope:
                if is_runtime(self.scope[name]):
                    return False
            elif name in self.frame.partial:
                return False
        return True

    def static_while(self, node):
        count = 0
        self.frame.loop_depth += 1
        try:
            while True:
                cond = self.visit(node.test)
                if is_runtime(cond):
                    raise self.error(node.test, f"this while loop started as a compile-time loop but "
                                                f"its condition became {describe(cond)} after "
                                                f"{count} iteration(s)")
                if not cond:
                    return
                self.visit_block(node.body)
                count += 1
                if count > _MAX_STATIC_ITERATIONS:
                    raise self.error(node, f"compile-time while loop did not finish after "
                                           f"{_MAX_STATIC_ITERATIONS} iterations")
        finally:
            self.frame.loop_depth -= 1
