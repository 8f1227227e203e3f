"""The notebooks run from top to bottom without error."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors


def test_there_is_a_notebook():
    assert NOTEBOOKS


def test_baselines_notebook_marks_invalid_dataflows(tmp_path):
    """With a workload where some baselines do not fit (mlp on Edge), the hatched bars and
    their legend entry are drawn without error."""
    path = Path(__file__).resolve().parents[1] / "notebooks" / "baselines.ipynb"
    nb = nbformat.read(path, as_version=4)
    setup = next(c for c in nb.cells if "ARCH, WORKLOAD, SIZES = " in c.source)
    setup.source = setup.source.replace('"edge", "attention", {}', '"edge", "mlp", {}')
    assert '"mlp"' in setup.source
    nb.cells.append(nbformat.v4.new_code_cell("assert not all(valid.values())"))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors
