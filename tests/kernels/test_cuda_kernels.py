"""Generated CUDA: every kernel compiles with nvcc for a real architecture where nvcc
exists, computes the workload (emulated on the CPU, blocks' threads as OpenMP threads), and
runs on a GPU where there is one."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from tileflow.dataflows import build
from tileflow.dataflows.registry import baselines_for
from tileflow.kernels.cuda_emulate import run_emulated
from tileflow.kernels.cuda_launch import gpu_missing
from tileflow.kernels.cuda_source import generate_cuda
from tileflow.kernels.gpu_trees import random_valid_gpu_trees
from tileflow.kernels.nest import analyse
from tileflow.kernels.reference import random_inputs, run_reference
from tileflow.kernels.trees import random_valid_trees
from tileflow.specs.arch import load_arch
from tileflow.specs.workload import load_workload
from tileflow.tree import Dataflow, Loop, Op, Tile

SMALL = {
    "gemm-chain": {"b": 2, "m": 24, "l": 20, "k": 8, "n": 12},
    "attention": {"b": 2, "m": 24, "l": 20, "k": 8, "n": 12},
    "mlp": {"m": 12, "d": 8, "f": 20, "e": 6},
    "conv-chain": {"c0": 3, "c1": 4, "c2": 5, "h": 9, "w": 9, "st1": 2, "k1": 3, "k2": 3},
}
GPUS = ("gpu-a100", "gpu-h100")


def _flows():
    for name, sizes in SMALL.items():
        w = load_workload(name, sizes)
        for gpu in GPUS:
            arch = load_arch(gpu)
            for flow in baselines_for(w):
                yield name, gpu, w, arch, build(flow, w, arch)


@pytest.mark.slow
def test_every_generated_kernel_compiles_with_nvcc(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed: CUDA sources are not compiled here")
    sources = [generate_cuda(analyse(w, arch, flow), prefix=f"k{i}").text
               for i, (_, _, w, arch, flow) in enumerate(_flows())]
    w = load_workload("attention", SMALL["attention"])
    arch = load_arch("gpu-a100")
    for j, flow in enumerate(random_valid_trees(w, arch, 3, seed=2)):
        sources.append(generate_cuda(analyse(w, arch, flow), prefix=f"r{j}").text)
    h100 = load_arch("gpu-h100")
    for name in ("attention", "gemm-chain"):
        wh = load_workload(name, SMALL[name])
        for j, flow in enumerate(random_valid_gpu_trees(wh, h100, 4, seed=3)):
            sources.append(generate_cuda(analyse(wh, h100, flow), prefix=f"g{name[0]}{j}").text)
    path = tmp_path / "all.cu"
    path.write_text("\n".join(sources))
    done = subprocess.run(["nvcc", "-arch=sm_80", "-c", str(path), "-o", str(tmp_path / "a.o")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    stage = r"__global__ void __launch_bounds__\(\d+\) \w+_stage\d+\("
    assert len(re.findall(stage, path.read_text())) >= len(sources)


@pytest.mark.parametrize("workload", list(SMALL))
def test_emulated_cuda_kernels_match_reference(workload):
    w = load_workload(workload, SMALL[workload])
    x = random_inputs(w, 1)
    ref = run_reference(w, x)
    arch = load_arch("gpu-a100")
    for flow in baselines_for(w):
        source = generate_cuda(analyse(w, arch, build(flow, w, arch)))
        out = run_emulated(source, w.shapes, x)
        for t in w.outputs:
            assert np.abs(out[t] - ref[t]).max() <= 1e-5 * np.abs(ref[t]).max(), (flow, t)


def test_blocks_for_core_spatial_loops_threads_for_register_tiles():
    w = load_workload("gemm-chain", SMALL["gemm-chain"])
    arch = load_arch("gpu-a100")
    source = generate_cuda(analyse(w, arch, build("chimera", w, arch)))
    stage = source.launches[-1]
    assert stage.blocks == 108  # m spread over the SMs (a thread block per core-level tile)
    assert "blocks stride" in source.text and "threads stride" in source.text
    assert "__shared__ __align__(32) float C_pool" in source.text  # C homed in shared memory


@pytest.mark.skipif(gpu_missing() is not None, reason=f"no GPU launch here: {gpu_missing()}")
def test_cuda_kernels_run_on_the_gpu():
    from tileflow.kernels.cuda_launch import run_cuda

    w = load_workload("attention", SMALL["attention"])
    arch = load_arch("gpu-a100")
    x = random_inputs(w)
    ref = run_reference(w, x)
    for flow in baselines_for(w):
        out, timing = run_cuda(generate_cuda(analyse(w, arch, build(flow, w, arch))),
                               w.shapes, x)
        assert np.abs(out["O"] - ref["O"]).max() <= 1e-4 * np.abs(ref["O"]).max()
        assert timing.median_s > 0


@pytest.mark.parametrize("name,sms,tflops,hbm_gbps,smem_kb,l2_mb", [
    ("gpu-a100", 108, 312, 1555, 164, 40),
    ("gpu-h100", 132, 989, 3350, 228, 50),
])
def test_gpu_descriptions_give_the_published_peaks(name, sms, tflops, hbm_gbps, smem_kb, l2_mb):
    """Peak dense fp16 tensor throughput, HBM bandwidth, shared memory per SM and L2 size of
    the vendor data sheets, recomputed from the description's fields."""
    arch = load_arch(name)
    smem = arch.level("SMEM")
    assert smem.instances == sms
    peak = 2 * arch.total_macs_per_cycle * arch.clock_ghz / 1e3  # TFLOP/s
    assert peak == pytest.approx(tflops, rel=0.02)
    hbm = arch.levels[0].read_words_per_cycle * arch.word_bytes * arch.clock_ghz
    assert hbm == pytest.approx(hbm_gbps, rel=1e-6)
    assert smem.capacity_words * arch.word_bytes / 1024 == pytest.approx(smem_kb, rel=0.01)
    assert arch.level("L2").capacity_words * arch.word_bytes / 2**20 == pytest.approx(l2_mb)


def test_register_tile_keeps_the_accumulator_in_a_register():
    """gemm2's register tile loops over l (its reduction) 4 times: the sum runs in a local
    variable over an unrolled loop and E is updated once per register tile, not per step;
    the result is the reference's."""
    w = load_workload("gemm-chain", SMALL["gemm-chain"])
    arch = load_arch("gpu-h100")
    stages = (Tile("SMEM", (Loop("l", 20), Loop("k", 8), Loop("m", 24, True, "x")),
                   (Tile("Reg", (), (Op("gemm1"),)),)),
              Tile("SMEM", (Loop("l", 5), Loop("m", 24, True, "x"), Loop("n", 12, True, "y")),
                   (Tile("Reg", (Loop("l", 4),), (Op("gemm2"),)),)))
    flow = Dataflow(Tile("HBM", (Loop("b", 2, True),), stages, "Seq"), "reg")
    source = generate_cuda(analyse(w, arch, flow))
    text = source.text
    assert text.count("register accumulator") == 1
    body = text[text.index("register accumulator"):]
    acc = re.search(r"float (acc\d+) = 0.0f;", text).group(1)
    lines = body.splitlines()
    start = next(i for i, ln in enumerate(lines) if "#pragma unroll" in ln)
    write = next(i for i, ln in enumerate(lines) if ln.strip().endswith(f"+= {acc};"))
    loop = "\n".join(lines[start:write])
    assert "/* l:4 stride 1 */" in loop and f"{acc} += C_local[" in loop
    assert "E[((" not in loop  # the loop does not touch E ...
    assert lines[write - 1].strip() == "}" and lines[write].strip().startswith("E[((")
    assert body.count("E[((") == 1  # ... which is updated once, after it
    x = random_inputs(w, 2)
    ref = run_reference(w, x)
    out = run_emulated(source, w.shapes, x)
    assert np.abs(out["E"] - ref["E"]).max() <= 1e-5 * np.abs(ref["E"]).max()
