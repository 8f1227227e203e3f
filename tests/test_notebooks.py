"""The notebooks run from top to bottom without error, and their charts read: every chart
has a legend for every mark (labelled series, reference lines, hatched invalid bars), and no
stacked bar chart uses a log scale (it would hide the largest parts)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # every test here takes tens of seconds

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_there_is_a_notebook():
    assert NOTEBOOKS


# Run first in the kernel: before the inline backend shows and closes the figures of a cell,
# keep them, so that the last cell can inspect every chart the notebook drew.
KEEP_FIGURES = """
import matplotlib.pyplot as _plt
_kept = []
get_ipython().events.register(
    "post_execute", lambda: _kept.extend(_plt.figure(n) for n in _plt.get_fignums()))
"""

# The last cell: a list of what is wrong with the charts (empty when they read).
CHECK_CHARTS = """
from matplotlib.container import BarContainer
_problems = []
for _fig in dict.fromkeys(_kept):
    for _ax in _fig.axes:
        _legends = [l for l in [_ax.get_legend(), *_fig.legends] if l is not None]
        _labels = {t.get_text() for l in _legends for t in l.get_texts()}
        _where = f"{_fig.texts[0].get_text() if _fig.texts else ''} {_ax.get_title()!r}"
        _bars = [b for c in _ax.containers if isinstance(c, BarContainer) for b in c]
        _marks = [*_ax.lines, *_ax.collections, *_bars]
        if _marks and not _legends:
            _problems.append(f"{_where}: no legend")
        for _a in [*_ax.lines, *_ax.collections, *_ax.containers]:
            _label = _a.get_label()
            if _label and not _label.startswith("_") and _label not in _labels:
                _problems.append(f"{_where}: {_label!r} not in the legend")
        for _line in _ax.lines:  # a reference line without a label is an unexplained mark
            if len(_line.get_xdata()) > 1 and _line.get_label().startswith("_"):
                _problems.append(f"{_where}: an unlabelled line")
        if any(b.get_hatch() for b in _bars) and not any("invalid" in t for t in _labels):
            _problems.append(f"{_where}: hatched bars but no legend entry for them")
        if _ax.get_yscale() == "log" and any(b.get_y() > 0 for b in _bars):
            _problems.append(f"{_where}: stacked bars on a log scale")
_problems
"""


def run_checked(nb, tmp_path) -> None:
    """Execute a notebook top to bottom (in a scratch folder): no cell may fail, and the
    charts it drew must pass CHECK_CHARTS."""
    nb.cells.insert(0, nbformat.v4.new_code_cell(KEEP_FIGURES))
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_CHARTS))
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.output_type == "error"]
    assert not errors
    [result] = [o for o in nb.cells[-1].outputs if o.output_type == "execute_result"]
    assert result["data"]["text/plain"] == "[]"
    drawn = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert drawn  # the notebook draws charts, and the check saw them


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_and_its_charts_read(path, tmp_path):
    run_checked(nbformat.read(path, as_version=4), tmp_path)


def test_baselines_notebook_marks_invalid_dataflows(tmp_path):
    """With a workload where some baselines do not fit (mlp on Edge), the hatched bars and
    their legend entry are drawn without error."""
    path = Path(__file__).resolve().parents[1] / "notebooks" / "baselines.ipynb"
    nb = nbformat.read(path, as_version=4)
    setup = next(c for c in nb.cells if "ARCH, WORKLOAD, SIZES = " in c.source)
    setup.source = setup.source.replace('"edge", "attention", {}', '"edge", "mlp", {}')
    assert '"mlp"' in setup.source
    nb.cells.append(nbformat.v4.new_code_cell(
        "assert not all(valid.values())\n"
        "assert summary[~summary.valid].speedup.isna().all()\n"
        "assert summary[~summary.valid].reason.str.contains('needs').all()"))
    run_checked(nb, tmp_path)




def test_the_chart_check_finds_what_it_looks_for(tmp_path):
    """The check above, on charts made to fail it: a line without a label, hatched bars with
    no legend entry, stacked bars on a log scale."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(KEEP_FIGURES), nbformat.v4.new_code_cell("""
%matplotlib inline
fig, (a, b) = _plt.subplots(1, 2)
a.plot([1, 2], [1, 2], "k--")
a.plot([1, 2], [2, 1], label="model")
a.legend()
bars = b.bar(["x", "y"], [1, 2], label="reads")
b.bar(["x", "y"], [3, 4], bottom=[1, 2], label="fills")
bars[0].set_hatch("//")
b.set_yscale("log")
b.legend()
"""), nbformat.v4.new_code_cell(CHECK_CHARTS)]
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    [result] = [o for o in nb.cells[-1].outputs if o.output_type == "execute_result"]
    text = result["data"]["text/plain"]
    assert "an unlabelled line" in text
    assert "hatched bars but no legend entry" in text
    assert "stacked bars on a log scale" in text


def test_the_cpu_notebook_fits_against_the_machine_that_measured_the_rows():
    """Its committed figures are reproducible anywhere only if the fit reads the committed
    machine's description, never the machine running the notebook (`load_arch("host")`):
    executing it here cannot tell, as this machine may be the one that measured them."""
    [path] = [p for p in NOTEBOOKS if p.stem == "cpu-accuracy"]
    code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                     if c.cell_type == "code")
    assert 'load_arch(root / "validate" / "cpu" / "host.yaml")' in code
    assert "load_arch(\"host\")" not in code and "load_arch('host')" not in code
