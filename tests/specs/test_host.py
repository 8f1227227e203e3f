"""The host description reads cache sizes and sharing from the OS's cache folders."""

from __future__ import annotations

from tileflow.specs.arch import parse_arch
from tileflow.specs.host import host_description
from tileflow.specs.yamlfile import Field


def _cache(root, index, level, kind, size, shared):
    folder = root / f"index{index}"
    folder.mkdir(parents=True)
    (folder / "level").write_text(f"{level}\n")
    (folder / "type").write_text(f"{kind}\n")
    (folder / "size").write_text(f"{size}\n")
    (folder / "shared_cpu_list").write_text(f"{shared}\n")


def test_four_cpus_with_private_l1_l2_and_a_shared_l3(tmp_path):
    _cache(tmp_path, 0, 1, "Data", "48K", "0")
    _cache(tmp_path, 1, 1, "Instruction", "32K", "0")
    _cache(tmp_path, 2, 2, "Unified", "2048K", "0")
    _cache(tmp_path, 3, 3, "Unified", "16M", "0-3")
    arch = parse_arch(Field(host_description(tmp_path, cpus=4), "host"))
    levels = {lv.name: lv for lv in arch.levels}
    assert [lv.name for lv in arch.levels] == ["DRAM", "L3", "L2", "L1", "Reg"]
    assert levels["L3"].capacity_words == 16 * 2**20 / 4 and levels["L3"].instances == 1
    assert levels["L2"].capacity_words == 2 * 2**20 / 4 and levels["L2"].instances == 4
    assert levels["L1"].capacity_words == 48 * 1024 / 4 and levels["L1"].instances == 4
    assert levels["L1"].fanout == 1  # one L1 per L2
