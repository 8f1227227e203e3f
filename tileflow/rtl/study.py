"""Evaluate every row of the RTL dataset, measure the model's error, and calibrate the
accelerator's free timing parameters on one half of the rows, testing on the other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from tileflow.calibrate import metrics
from tileflow.calibrate.fit import fit, halves
from tileflow.calibrate.parameters import Parameter, ParameterSet
from tileflow.cost import evaluate
from tileflow.errors import InputError
from tileflow.evaluator.batch import Trace, traced
from tileflow.evaluator.lattice import GridTooLarge
from tileflow.evaluator.retime import retimed_many
from tileflow.evaluator.structure import structure_of
from tileflow.rtl.mappings import chain_mapping, gemm_mapping
from tileflow.specs.arch import OVERLAPS, Architecture, load_arch
from tileflow.specs.workload import Workload, load_workload
from tileflow.tables import Column, read_table
from tileflow.tree import Dataflow

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "rtl-systolic"
FILES = {"gemm": "gemm_1152.csv", "fused": "gemm_chain_131.csv"}
TRANSFERS = {  # measured column (bits) -> what the model counts, in words
    "dram_to_buffer": "DRAM reads",
    "buffer_to_dram": "DRAM writes",
    "buffer_to_reg": "Buffer reads",
    "reg_to_buffer": "Buffer updates",
}
BITS_PER_WORD = 16
# the free timing parameters calibration fits, all of the DRAM level, with physical bounds
# (a 16 x 16 array at 400 MHz cannot take more than 64 words per cycle from one DRAM port)
DECLARED = ParameterSet((
    Parameter("read_words_per_cycle", "DRAM read bandwidth", 0.5, 64.0, 1.0, "words/cycle"),
    Parameter("write_words_per_cycle", "DRAM write bandwidth", 0.5, 64.0, 1.0, "words/cycle"),
    Parameter("step_overhead_cycles", "DRAM request overhead per step", 0.0, 1e3, 0.0,
              "cycles", log_scale=False),
    Parameter("latency_cycles", "DRAM latency before the first word", 0.0, 1e4, 0.0,
              "cycles", log_scale=False),
))
PARAMETERS = DECLARED.names


COLUMNS = {  # file -> the columns the study reads
    "gemm": ("M", "N", "K", "tile_M", "tile_N", "tile_K", "rtl_cycles"),
    "fused": ("M", "L", "K", "N", "tile_M", "tile_K", "tile_L", "rtl_cycles",
              *(f"{name}_bits" for name in TRANSFERS)),
}
SOURCE = ("The measurements are RTL-simulated cycle counts of a 16 x 16 systolic accelerator, "
          "published with the public artifact of the TileFlow paper (MICRO 2023; "
          "https://github.com/pku-liang/TileFlow, MIT licence, PKU Yun (Eric) Liang research "
          "group), converted to CSV.")


def dataset_help(folder: Path) -> str:
    """Where the measurements come from, which files and columns are needed, and how to point
    at them: what a user without the dataset reads."""
    columns = "; ".join(f"{FILES[k]} has the columns {', '.join(COLUMNS[k])}" for k in FILES)
    return (f"{SOURCE} It needs {' and '.join(FILES.values())} in one folder ({columns}). "
            f"Put them in a folder and run `tileflow validate rtl --data DIR` (default "
            f"folder: {folder}).")


def load_dataset(data: str | Path | None = None) -> dict[str, pd.DataFrame]:
    folder = Path(data) if data else DEFAULT_DATA
    missing = [f for f in FILES.values() if not (folder / f).is_file()]
    if missing:
        raise InputError(f"the RTL dataset is not in {folder} (missing {', '.join(missing)}). "
                         + dataset_help(DEFAULT_DATA))
    return {key: read_table(folder / name, _schema(key)) for key, name in FILES.items()}


MAX_SIZE = 16_384  # 16 x the dataset's largest size: a row's analysis stays in seconds


def _schema(key: str) -> dict[str, Column]:
    """Sizes and tiles are integers from 1 to MAX_SIZE, cycles a positive number, transfers
    >= 0 bits."""
    def column(name: str) -> Column:
        if name == "rtl_cycles":
            return Column("number", 0, strict=True)
        if name.endswith("_bits"):
            return Column("number", 0)
        return Column("integer", 1, maximum=MAX_SIZE)

    return {name: column(name) for name in COLUMNS[key]}


@cache
def _gemm_workload(m: int, n: int, k: int) -> Workload:
    return load_workload("gemm", {"m": m, "n": n, "k": k})


@cache
def _chain_workload(m: int, l: int, k: int, n: int) -> Workload:  # noqa: E741
    return load_workload("gemm-chain", {"b": 1, "m": m, "l": l, "k": k, "n": n})


@dataclass(frozen=True)
class Row:
    """One dataset row, analysed: the model's pass over it, ready for its cycles under any
    timing (`evaluator.retime`)."""

    workload: Workload
    flow: Dataflow
    trace: Trace
    measured_cycles: float


def analyse(kind: str, frame: pd.DataFrame, arch: Architecture) -> list[Row]:
    rows = []
    for r in frame.itertuples():
        if kind == "gemm":
            w = _gemm_workload(r.M, r.N, r.K)
            flow = gemm_mapping(r.M, r.N, r.K, r.tile_M, r.tile_N, r.tile_K)
        else:
            w = _chain_workload(r.M, r.L, r.K, r.N)
            flow = chain_mapping(r.M, r.L, r.K, r.N, r.tile_M, r.tile_K, r.tile_L)
        structure = structure_of(w, arch, flow)
        try:
            trace = traced(structure, structure.default_factors.reshape(1, -1))
        except GridTooLarge as exc:
            raise InputError(f"{FILES[kind]}, data row {r.Index + 1}: its tiles clip so that "
                             f"the model's sums enumerate {exc}, more than it takes at once; "
                             "tiles that divide their dimensions are counted in closed form"
                             ) from None
        rows.append(Row(w, flow, trace, float(r.rtl_cycles)))
    return rows


def with_dram(arch: Architecture, values: Sequence[float]) -> Architecture:
    """The accelerator with its DRAM timing parameters replaced (PARAMETERS order)."""
    dram = replace(arch.levels[0], **dict(zip(PARAMETERS, values, strict=True)))
    return replace(arch, levels=(dram, *arch.levels[1:]))


def predict(rows: Sequence[Row], arch: Architecture) -> np.ndarray:
    return retimed_many([row.trace for row in rows], arch)


def dram_values(arch: Architecture) -> list[float]:
    return [getattr(arch.levels[0], p) for p in PARAMETERS]


def parameters_for(arch: Architecture) -> ParameterSet:
    """The declared DRAM parameters, starting from the accelerator's own values."""
    start = dram_values(arch)
    return ParameterSet(tuple(replace(p, default=min(max(v, p.lower), p.upper))
                              for p, v in zip(DECLARED.parameters, start, strict=True)))


@dataclass(frozen=True)
class Calibration:
    values: list[float]
    bound_hits: list[dict]


def calibrate(rows: Sequence[Row], arch: Architecture) -> Calibration:
    """Fit the DRAM timing parameters (tileflow.calibrate: log-scale error, deterministic)."""
    measured = np.array([r.measured_cycles for r in rows])
    params = parameters_for(arch)

    def cost(values: np.ndarray, index: np.ndarray) -> np.ndarray:
        return predict([rows[i] for i in index], with_dram(arch, values))

    result = fit(params, cost, measured, np.arange(len(rows)), max_evaluations=60)
    return Calibration([float(v) for v in result.values], list(result.bound_hits))


mape = metrics.mape
r2_identity = metrics.r2_identity


def transfers(rows: Sequence[Row], arch: Architecture) -> pd.DataFrame:
    """The model's words for each of the four measured transfers of the fused set."""
    out = []
    for row in rows:
        r = evaluate(row.workload, arch, row.flow)
        buffer = r.traffic.get("Buffer", {})
        out.append({
            "dram_to_buffer": r.level_reads("DRAM"),
            "buffer_to_dram": r.level_writes("DRAM"),
            "buffer_to_reg": r.level_reads("Buffer"),
            "reg_to_buffer": sum(m.update for m in buffer.values()),
        })
    return pd.DataFrame(out)


split_halves = halves


def without_first_touch_fills(arch: Architecture) -> Architecture:
    """The accelerator with every level's `first_touch_fills` off (the model before it)."""
    return replace(arch, levels=tuple(replace(lv, first_touch_fills=False)
                                      for lv in arch.levels))


@dataclass(frozen=True)
class SetResult:
    frame: pd.DataFrame  # the dataset plus predictions and errors
    params_by_half: tuple[list[float], list[float]]
    heldout_mape: float
    bound_hits: tuple[dict, ...] = ()  # parameters that ended at a bound, either half


def study(kind: str, frame: pd.DataFrame, arch: Architecture, seed: int = 0) -> SetResult:
    """Uncalibrated predictions for every row; calibration on each half, tested on the other."""
    rows = analyse(kind, frame, arch)
    frame = frame.copy()
    frame["predicted"] = predict(rows, arch)
    for other in OVERLAPS:  # the same rows under the other overlap conventions
        if other != arch.overlap:
            frame[f"predicted_{other.replace('-', '_')}"] = predict(
                rows, replace(arch, overlap=other))
    bounds = [evaluate(row.workload, arch, row.flow).bottleneck for row in rows]
    frame["bottleneck"] = [b.message.split(" (")[0] for b in bounds]
    frame["bottleneck_kind"] = [b.kind for b in bounds]
    frame["bottleneck_level"] = [b.level or "" for b in bounds]
    first, second = split_halves(len(rows), seed)
    calibrated = np.empty(len(rows))
    params, hits = [], []
    for half, (train, test) in enumerate(((first, second), (second, first)), 1):
        result = calibrate([rows[i] for i in train], arch)
        params.append(result.values)
        hits += [{**h, "half": half} for h in result.bound_hits]
        calibrated[test] = predict([rows[i] for i in test], with_dram(arch, result.values))
    frame["calibrated_heldout"] = calibrated
    plain = without_first_touch_fills(arch)
    if plain != arch:  # the previous model, for the report's before / after
        earlier = analyse(kind, frame, plain)
        frame["predicted_before"] = predict(earlier, plain)
        if kind == "fused":
            words = transfers(earlier, plain)
            for column in TRANSFERS:
                frame[f"{column}_predicted_before"] = words[column].to_numpy()
    frame["error"] = frame.predicted / frame.rtl_cycles - 1
    frame["error_calibrated"] = frame.calibrated_heldout / frame.rtl_cycles - 1
    if kind == "fused":
        model = transfers(rows, arch)
        for column in TRANSFERS:
            frame[f"{column}_words"] = frame[f"{column}_bits"] / BITS_PER_WORD
            frame[f"{column}_predicted"] = model[column].to_numpy()
    held = mape(calibrated, frame.rtl_cycles.to_numpy())
    return SetResult(frame, (params[0], params[1]), held, tuple(hits))


def run(data: str | Path | None = None, overlap: str | None = None) -> dict[str, SetResult]:
    """Both sets; `overlap` ('perfect' or 'fill-drain') replaces the accelerators' own."""
    frames = load_dataset(data)
    archs = {kind: load_arch(f"rtl-systolic-{'gemm' if kind == 'gemm' else 'chain'}")
             for kind in FILES}
    if overlap:
        archs = {kind: replace(arch, overlap=overlap) for kind, arch in archs.items()}
    return {kind: study(kind, frames[kind], archs[kind]) for kind in ("gemm", "fused")}
