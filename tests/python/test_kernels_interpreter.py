"""The library's kernels under the numpy interpreter (TESSERA_INTERPRET=1 semantics, the
language's test oracle) give what the compiled CPU kernels give (numpy inputs: the
interpreter takes numpy arrays)."""
import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_kernels_ops import ALL_CASES, MM_CASES  # noqa: E402

J = importlib.import_module("tessera.jit")


def _run(case, interpret):
    gen = torch.Generator().manual_seed(11)
    inputs = [t.numpy() for t in case.make(18 if case in MM_CASES else (3, 33), torch.float32, gen)]
    J.set_interpret(interpret)
    try:
        ys = case.run(*inputs)
    finally:
        J.set_interpret(False)
    return ys if isinstance(ys, tuple) else (ys,)


@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_interpreter_matches_compiled(case):
    for got, want in zip(_run(case, True), _run(case, False)):
        # Both round every op as numpy does; sums may run in a different order.
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
