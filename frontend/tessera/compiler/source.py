"""Reading a kernel's (or helper's) Python source: the parsed `def`, absolute positions
of its nodes, and the syntactic facts the code generator needs (which names a loop
body assigns; moving statements after an early `return` into the other branch).
"""
from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap


class SourceUnavailable(Exception):
    pass


class FunctionSource:
    """The parsed source of one Python function, with absolute positions.

    Positions: `ast` gives lines relative to the dedented snippet and columns in UTF-8
    bytes; position() returns the absolute file line (1-based) and the 0-based
    character column in the original (not dedented) line."""

    def __init__(self, fn):
        self.fn = fn
        self.name = fn.__name__
        try:
            lines, start = inspect.getsourcelines(fn)
        except (OSError, TypeError) as e:
            raise SourceUnavailable(f"cannot read the source of {self.name}: {e}") from None
        filename = None
        try:
            filename = inspect.getsourcefile(fn)
        except TypeError:
            pass
        filename = filename or fn.__code__.co_filename
        self.filename = filename if filename.startswith("<") else os.path.abspath(filename)
        self.lines = lines
        self.line_offset = start - 1
        text = "".join(lines)
        dedented = textwrap.dedent(text)
        self.dedented_lines = dedented.splitlines(True)
        first, first_ded = lines[0], self.dedented_lines[0] if self.dedented_lines else ""
        self.col_shift = (len(first) - len(first.lstrip())) - (len(first_ded) - len(first_ded.lstrip()))
        try:
            tree = ast.parse(dedented)
        except SyntaxError as e:
            raise SourceUnavailable(f"cannot parse the source of {self.name}: {e}") from None
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        if not defs:
            raise SourceUnavailable(f"{self.name} is not defined with `def` (lambdas cannot be compiled)")
        self.node: ast.FunctionDef = defs[0]

    def position(self, node):
        """(absolute line, 0-based column) of an AST node."""
        line = node.lineno
        return line + self.line_offset, self._char_col(line, node.col_offset)

    def end_column(self, node):
        """0-based end column of node when it ends on its first line, else None."""
        end_line = getattr(node, "end_lineno", None)
        if end_line != node.lineno or node.end_col_offset is None:
            return None
        return self._char_col(end_line, node.end_col_offset)

    def _char_col(self, rel_line, byte_col):
        if 1 <= rel_line <= len(self.dedented_lines):
            text = self.dedented_lines[rel_line - 1]
            byte_col = len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))
        return byte_col + self.col_shift

    def source_line(self, abs_line):
        i = abs_line - self.line_offset - 1
        if 0 <= i < len(self.lines):
            return self.lines[i]
        return None


@functools.lru_cache(maxsize=512)
def _cached_source(code, fn_ref):
    return FunctionSource(fn_ref.fn)


class _FnRef:
    """Hashable by code object only, so the cache key ignores the function object."""

    def __init__(self, fn):
        self.fn = fn

    def __hash__(self):
        return hash(self.fn.__code__)

    def __eq__(self, other):
        return self.fn.__code__ is other.fn.__code__


def function_source(fn) -> FunctionSource:
    return _cached_source(fn.__code__, _FnRef(fn))


# --------------------------------------------------------------------------- analysis

_SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _walk_same_scope(nodes):
    """Every node under `nodes`, not descending into nested scopes."""
    stack = list(reversed(nodes))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _SCOPE_NODES):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def assigned_names(stmts):
    """Names a list of statements may assign, in order of first appearance."""
    seen = {}
    for node in _walk_same_scope(stmts):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            seen.setdefault(node.id, node)
    return seen


def last_assignment(stmts, name):
    """The last statement-level node in `stmts` (source order) that assigns `name`."""
    last = None
    for node in _walk_same_scope(stmts):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name:
            if last is None or (node.lineno, node.col_offset) > (last.lineno, last.col_offset):
                last = node
    return last


def names_read(expr):
    return {n.id for n in _walk_same_scope([expr]) if isinstance(n, ast.Name)}


def has_call(expr):
    return any(isinstance(n, ast.Call) for n in _walk_same_scope([expr]))


def contains_return(stmts):
    return any(isinstance(n, ast.Return) for n in _walk_same_scope(stmts))


def always_returns(stmts):
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    if isinstance(last, ast.If):
        return always_returns(last.body) and always_returns(last.orelse)
    return False


def restructure_early_returns(stmts):
    """Make every `return` the last statement of its block: for `if c: ...return...`
    followed by more statements, the statements after the `if` move into the branches
    that do not always return. Loops are left alone (return inside a loop is an error
    reported when it is reached). Pure: returns new lists and new If nodes."""
    out = []
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Return):
            out.append(stmt)
            return out  # anything after is dead code
        if isinstance(stmt, ast.If) and i + 1 < len(stmts) and contains_return([stmt]):
            rest = stmts[i + 1:]
            body = stmt.body if always_returns(stmt.body) else stmt.body + rest
            orelse = stmt.orelse if always_returns(stmt.orelse) else stmt.orelse + rest
            new_if = ast.If(test=stmt.test, body=body, orelse=orelse)
            ast.copy_location(new_if, stmt)
            new_if.end_lineno, new_if.end_col_offset = stmt.end_lineno, stmt.end_col_offset
            out.append(new_if)
            return out
        out.append(stmt)
    return out
