"""Grid dependency control: the two halves of programmatic dependent launch (PDL).

With PDL a kernel may start while the previous kernel in its stream is still running,
so that its prologue (index math, loads of data nobody writes) overlaps that kernel's
tail. The rule Tessera follows: a kernel that calls `gdc_wait` is launched with PDL
(on sm_90 and newer); whatever it reads that the previous kernel writes, and whatever
it writes that the previous kernel reads or writes, must come after its `gdc_wait`.
`gdc_launch_dependents` in the previous kernel says how early the next may start.
On older GPUs, on the CPU and in the interpreter both are no-ops and kernels run one
after the other. docs/language.md has the details; PTX's `griddepcontrol` implements them.
"""
from ...core import builtin


@builtin(namespace="tl.extra.cuda")
def gdc_wait():
    """Waits until the previous kernel in the stream has finished and its memory writes
    are visible to this program. Calling it makes the kernel a PDL launch (sm_90+), so
    put it before every access to memory that kernel writes, and in every program (at
    the kernel's top level, not under a branch some programs skip). Harmless when the
    kernel was not launched early: it returns at once."""


@builtin(namespace="tl.extra.cuda")
def gdc_launch_dependents():
    """Lets the next kernel in the stream start (if it is a PDL launch, i.e. it calls
    gdc_wait) once every program of this kernel has called this or exited. A hint, not
    a memory fence: the next kernel still sees this kernel's writes only after its own
    gdc_wait. Calls after a program's first one do nothing."""
