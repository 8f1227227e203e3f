"""`tileflow import` checks its inputs: a problem without data-spaces, synonym keys given
together, a v0.4 tag in a v0.3 file, a MAC datawidth that is not whole bytes — each an exit-2
message with file and line; a meshX that does not divide the instances is a note of the
import's report, with its line; an --out that
is not a writable folder is refused before anything is converted; two inputs with the same
name never write one output; mapping factors given as a list are read as the string form."""

from __future__ import annotations

import pytest

from tests.interop.samples import ARCH_V03, GEMM_MAPPING, GEMM_PROBLEM, write
from tileflow.cli import main
from tileflow.interop.files import load_arch_any, load_dataflow_any, load_workload_any
from tileflow.tree import to_dict


def imported(capsys, *args: str) -> tuple[int, str]:
    code = main(["import", *args])
    return code, capsys.readouterr().err


def _without_data_spaces() -> str:
    start = GEMM_PROBLEM.index("    data-spaces:")
    return GEMM_PROBLEM[:start] + GEMM_PROBLEM[GEMM_PROBLEM.index("  instance:"):]


@pytest.mark.parametrize("name, text, line, words", [
    ("nods.yaml", _without_data_spaces(), "line 4", "data-spaces"),
    ("both.yaml", GEMM_PROBLEM.replace("    data-spaces:", "    data_spaces: []\n"
                                       "    data-spaces:"), "line 6", "same key"),
    ("rw.yaml", GEMM_PROBLEM.replace("read-write: True", "read-write: True\n"
                                     "      read_write: False"), "line 14", "same key"),
    ("tag.yaml", ARCH_V03.replace("    - name: DRAM", "    - !Component\n      name: DRAM"),
     "line 8", "v0.4"),
    ("dw7.yaml", ARCH_V03.replace("datawidth: 16", "datawidth: 7"), "line 27", "7-bit"),
])
def test_lax_timeloop_input_is_reported_with_its_line(name, text, line, words, tmp_path,
                                                      capsys):
    path = write(tmp_path, name, text)
    code, err = imported(capsys, str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and f"{name}, {line}" in err and words in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_mesh_that_does_not_divide_the_instances_is_reported(tmp_path, capsys):
    path = write(tmp_path, "mesh.yaml", ARCH_V03.replace("meshX: 2", "meshX: 3"))
    code = main(["import", str(path), "--out", str(tmp_path / "out")])
    said = capsys.readouterr()
    assert code == 0, said.err
    assert "meshX 3 does not divide" in said.out + said.err
    assert "line 27" in said.out + said.err


@pytest.mark.parametrize("out", ["a-file", "/dev/null", "/proc/tileflow-import"])
def test_an_out_that_is_not_a_writable_folder_is_refused(out, tmp_path, capsys):
    path = write(tmp_path, "p.yaml", GEMM_PROBLEM)
    if out == "a-file":
        out = str(tmp_path / out)
        (tmp_path / "a-file").write_text("kept")
    code, err = imported(capsys, str(path), "--out", out)
    assert code == 2 and "--out" in err and "Traceback" not in err
    if out.endswith("a-file"):
        assert (tmp_path / "a-file").read_text() == "kept"


def test_a_read_only_out_folder_is_refused(tmp_path, capsys, unwritable_folder):
    folder = unwritable_folder
    path = write(tmp_path, "p.yaml", GEMM_PROBLEM)
    code, err = imported(capsys, str(path), "--out", str(folder))
    assert code == 2 and "--out" in err and "permission denied" in err


def test_two_inputs_with_one_name_never_overwrite_each_other(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write(tmp_path / "a", "p.yaml", GEMM_PROBLEM)
    second = write(tmp_path / "b", "p.yaml", GEMM_PROBLEM.replace("M: 8", "M: 16"))
    code, err = imported(capsys, str(first), str(second), "--out", str(tmp_path / "out"))
    assert code == 2 and "a/p.yaml" in err and "b/p.yaml" in err and "p.workload.yaml" in err
    assert not (tmp_path / "out" / "p.workload.yaml").exists()
    # the same file twice (two spellings) is one input
    code, _ = imported(capsys, str(first), str(tmp_path / "a" / ".." / "a" / "p.yaml"),
                       "--out", str(tmp_path / "once"))
    assert code == 0 and (tmp_path / "once" / "p.workload.yaml").is_file()


def test_mapping_factors_as_a_list_read_as_the_string_form(tmp_path):
    arch = load_arch_any(write(tmp_path, "arch.yaml", ARCH_V03))
    w = load_workload_any(write(tmp_path, "prob.yaml", GEMM_PROBLEM))
    as_text = load_dataflow_any(write(tmp_path, "m1.yaml", GEMM_MAPPING), w, arch)
    listed = GEMM_MAPPING.replace("factors: M=2 N=3 K=1", "factors: [M=2, N=3, K=1]")
    as_list = load_dataflow_any(write(tmp_path, "m2.yaml", listed), w, arch)
    assert to_dict(as_list)["root"] == to_dict(as_text)["root"]
    assert "[M=2, N=3, K=1]" in listed
