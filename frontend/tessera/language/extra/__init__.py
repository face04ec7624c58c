"""tl.extra: builtins for one target, under triton.language.extra's names (tl.extra.cuda)."""
from . import cuda  # noqa: F401
