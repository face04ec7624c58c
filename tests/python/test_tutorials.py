"""The tutorials as users run them: each paired notebook executes top to bottom with
nbclient (python3 kernel, Agg backend, an isolated cache), and each .ipynb holds the
same cells as its jupytext .py source (regenerate: jupytext --sync tutorials/*.py)."""
import glob
import os

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUTORIALS = os.path.join(ROOT, "tutorials")
SOURCES = sorted(glob.glob(os.path.join(TUTORIALS, "[0-9]*.py")))
IDS = [os.path.basename(p)[:-3] for p in SOURCES]


def _cells(nb):
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


@pytest.mark.parametrize("py", SOURCES, ids=IDS)
def test_notebook_is_in_sync_with_its_source(py):
    ipynb = py[:-3] + ".ipynb"
    assert os.path.exists(ipynb), f"{ipynb} is missing: run `jupytext --to ipynb {py}`"
    from_py = jupytext.read(py)
    from_nb = jupytext.read(ipynb)
    assert _cells(from_nb) == _cells(from_py), f"{ipynb} is out of date: run `jupytext --sync {py}`"
    raw = nbformat.read(ipynb, as_version=4)
    for cell in raw.cells:  # notebooks are stored without outputs
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"{ipynb} stores outputs"


def _python3_kernel_available():
    try:
        from jupyter_client.kernelspec import KernelSpecManager
        return "python3" in KernelSpecManager().find_kernel_specs()
    except Exception:
        return False


@pytest.mark.parametrize("py", SOURCES, ids=IDS)
def test_notebook_executes(py, tmp_path):
    nbclient = pytest.importorskip("nbclient")
    if not _python3_kernel_available():
        pytest.skip("no 'python3' Jupyter kernel: python -m ipykernel install --user")
    nb = nbformat.read(py[:-3] + ".ipynb", as_version=4)
    env = dict(os.environ)
    env["MPLBACKEND"] = "Agg"
    env["TESSERA_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = os.path.join(ROOT, "frontend") + os.pathsep + env.get("PYTHONPATH", "")
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": TUTORIALS}})  # cwd=tutorials/
    client.execute(env=env)  # passed on to the kernel manager's start_kernel
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert os.listdir(tmp_path / "cache"), "the tutorial should have compiled through the isolated cache"
