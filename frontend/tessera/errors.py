"""Exceptions the compiler raises: user mistakes (CompilationError) and compiler bugs
(InternalCompilerError). Both carry the kernel source location when one is known."""
from __future__ import annotations


def _format_frame(filename, lineno, col_offset, source_line, where, end_col_offset=None):
    """Python-traceback-like lines: the location, the source line, a caret under the column.

    col_offset is 0-based (as in `ast`); the message prints a 1-based column."""
    lines = [f'  File "{filename}", line {lineno}, col {col_offset + 1}, in {where}']
    if source_line is not None:
        text = source_line.rstrip("\r\n").expandtabs(1)
        lines.append("    " + text)
        width = 1
        if end_col_offset is not None and end_col_offset > col_offset + 1:
            width = min(end_col_offset, len(text)) - col_offset
        lines.append("    " + " " * col_offset + "^" + "~" * max(0, width - 1))
    return lines


class CallSite:
    """Where an inlined helper was called from (for messages about code inside helpers)."""

    def __init__(self, function_name, filename, lineno, col_offset, source_line, end_col_offset=None):
        self.function_name = function_name
        self.filename = filename
        self.lineno = lineno
        self.col_offset = col_offset
        self.source_line = source_line
        self.end_col_offset = end_col_offset


class CompilationError(Exception):
    """A mistake in a kernel's source: says what is wrong, where (absolute file, line and
    1-based column), shows the source line with a caret under the column.

    Attributes: message (what is wrong), kernel_name, filename, lineno (absolute, 1-based),
    col_offset (0-based, like ast), source_line, function_name (the function holding the
    line: the kernel itself or an inlined helper), call_stack (list of CallSite, outermost
    first, empty when the error is in the kernel's own body)."""

    def __init__(self, message, kernel_name=None, filename=None, lineno=None, col_offset=None,
                 source_line=None, function_name=None, call_stack=(), end_col_offset=None):
        self.message = message
        self.kernel_name = kernel_name
        self.filename = filename
        self.lineno = lineno
        self.col_offset = col_offset
        self.source_line = source_line
        self.function_name = function_name or kernel_name
        self.call_stack = list(call_stack)
        self.end_col_offset = end_col_offset
        super().__init__(self._format())

    def _format(self):
        out = [self.message]
        if self.lineno is None:
            if self.kernel_name:
                out.append(f"  in kernel {self.kernel_name}")
            return "\n".join(out)
        if self.call_stack:
            where = f"function {self.function_name} (inlined into kernel {self.kernel_name})"
        else:
            where = f"kernel {self.kernel_name}"
        out += _format_frame(self.filename, self.lineno, self.col_offset, self.source_line, where,
                             self.end_col_offset)
        for site in reversed(self.call_stack):
            caller = (f"kernel {self.kernel_name}" if site.function_name == self.kernel_name
                      else f"function {site.function_name}")
            out.append("  called from:")
            out += _format_frame(site.filename, site.lineno, site.col_offset, site.source_line,
                                 caller, site.end_col_offset)
        return "\n".join(out)

    def __reduce__(self):  # keep pickling (e.g. across processes) working
        return (_rebuild_compilation_error, (self.__dict__.copy(),))


def _rebuild_compilation_error(state):
    err = CompilationError.__new__(CompilationError)
    err.__dict__.update(state)
    Exception.__init__(err, err._format())
    return err


class InternalCompilerError(Exception):
    """The compiler failed on input it should have handled or rejected: this is a
    Tessera bug, not a mistake in the kernel."""

    def __init__(self, message, kernel_name=None, filename=None, lineno=None, col_offset=None,
                 source_line=None):
        self.message = message
        self.kernel_name = kernel_name
        self.filename = filename
        self.lineno = lineno
        self.col_offset = col_offset
        self.source_line = source_line
        text = [f"internal compiler error: {message}",
                "This is a Tessera bug, not a mistake in your kernel; please report it "
                "with the kernel source."]
        if lineno is not None:
            text += _format_frame(filename, lineno, col_offset or 0, source_line,
                                  f"kernel {kernel_name}")
        super().__init__("\n".join(text))
