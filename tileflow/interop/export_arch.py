"""A TileFlow accelerator written as a Timeloop v0.4 architecture (storage components with
depth, width, block size, word width and bandwidths; fan-outs as spatial containers; one
MAC array under the innermost level), its energies as an Accelergy energy reference table
(ERT), and a single-operator workload as a Timeloop problem. What Timeloop's format cannot
state is returned as notes, one sentence each, never dropped in silence."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.tag import Tag

from tileflow.errors import InputError
from tileflow.interop.timeloop_arch import UNLIMITED_WORDS_PER_CYCLE
from tileflow.specs.arch import Architecture, Level
from tileflow.specs.workload import Workload

REGFILE_MAX_WORDS = 256  # a level this small is written as a register file (else SRAM)
TIMELOOP_CONVENTIONS = ("perfect overlap, write-backs that take no read bandwidth, Timeloop's "
                        "delta rule for inputs (`--conventions timeloop`)")


@dataclass
class Exported:
    """The files' contents (plain data for YAML) and the notes on what they cannot say."""

    arch: dict
    ert: dict
    notes: list[str] = field(default_factory=list)


def _node(tag: str, **content) -> CommentedMap:
    """A v0.4 node: a mapping tagged !Container or !Component."""
    node = CommentedMap(**content)
    node.yaml_set_ctag(Tag(suffix=tag))
    return node


def _number(value: float) -> int | float:
    """Whole numbers as integers (Timeloop reads `depth: 8`, not `8.0`)."""
    return int(value) if float(value).is_integer() else float(value)


def timeloop_architecture(arch: Architecture) -> Exported:
    """The accelerator as a Timeloop v0.4 `architecture:` and an Accelergy ERT."""
    notes: list[str] = []
    inner = arch.levels[-1]
    if arch.matrix.level != inner.name:
        raise InputError(f"the matrix unit is fed from '{arch.matrix.level}', not from the "
                         f"innermost level '{inner.name}': Timeloop's compute sits under the "
                         "innermost storage level")
    top: dict = {"global_cycle_seconds": 1e-9 / arch.clock_ghz}
    if arch.technology_nm is not None:
        top["technology"] = f"{arch.technology_nm:g}nm"
    nodes = [_node("!Container", name=arch.name or "system", attributes=top)]
    word_bits = arch.word_bytes * 8
    tables = []
    for i, lv in enumerate(arch.levels):
        if i and lv.fanout > 1:
            x, y = _mesh(lv, arch, notes)
            nodes.append(_node("!Container", name=f"{lv.name}_array",
                               spatial={"meshX": x, "meshY": y}))
        nodes.append(_node("!Component", name=lv.name, **_storage(lv, i == 0, word_bits,
                                                                   notes)))
        tables.append({"name": lv.name, "actions": [
            {"name": "read", "energy": lv.read_energy_pj},
            {"name": "write", "energy": lv.write_energy_pj},
            {"name": "update", "energy": lv.update_energy_pj}]})
        _level_notes(lv, notes)
    m = arch.matrix
    mac_name = next(n for n in ("MAC", "MAC_unit", "MAC_array_unit")
                    if n not in arch.level_index)  # one ERT table per name
    mac: dict = {"name": mac_name, "class": "intmac",
                 "attributes": {"datawidth": word_bits, "meshX": m.cols}}
    if m.parallelism > 1:  # MACs per instance of the innermost level
        mac["spatial"] = {"meshX": m.cols, "meshY": m.rows}
    nodes.append(_node("!Component", **mac))
    tables.append({"name": mac_name, "actions": [{"name": "compute",
                                                "energy": m.energy_pj_per_op}]})
    _compute_notes(arch, notes)
    return Exported({"architecture": {"version": "0.4", "nodes": nodes}},
                    {"ERT": {"version": "0.4", "tables": tables}}, notes)


def _mesh(lv: Level, arch: Architecture, notes: list[str]) -> tuple[int, int]:
    """meshX by meshY of a fan-out: TileFlow's y axis (an array's columns) is Timeloop's X
    and its x axis (rows) Timeloop's Y, as the mapping's split places them; the level's
    `mesh`, the array's where the level holds one MAC each, else one row."""
    if lv.mesh:
        notes.append(f"{lv.name}: mesh {lv.mesh[0]} x {lv.mesh[1]} written as meshY x meshX; "
                     "the importer reads the fan-out alone (spatial loops of an imported "
                     "mapping are checked against the total)")
        return lv.mesh[1], lv.mesh[0]
    m = arch.matrix
    if lv.name == m.level and m.parallelism == 1 and m.rows * m.cols == lv.fanout:
        return m.cols, m.rows
    return lv.fanout, 1


def _storage(lv: Level, outermost: bool, word_bits: int, notes: list[str]) -> dict:
    """One level as a storage component: `depth` words of one word each (block size 1, so
    that an access energy is an energy per word), its bandwidths in words per cycle."""
    attrs: dict = {}
    unbounded = math.isinf(lv.capacity_words)
    if not unbounded:
        depth = math.floor(lv.capacity_words)
        if depth != lv.capacity_words:
            notes.append(f"{lv.name}: capacity {lv.capacity_words:g} words written as depth "
                         f"{depth} (Timeloop's depth is a whole number of rows)")
        attrs["depth"] = depth
    attrs.update({"width": word_bits, "datawidth": word_bits, "block_size": 1})
    if lv.buffering == 2:  # twice the footprint within the depth: Timeloop's meaning
        attrs["multiple_buffering"] = 2
        notes.append(f"{lv.name}: 'buffering: 2' written as multiple_buffering 2 (the "
                     "importer reads half the depth, single footprint, same tiles fit)")
    elif lv.buffering == 1:
        notes.append(f"{lv.name}: 'buffering: 1' (transfers wait for the compute) not "
                     "written: Timeloop overlaps them, so cycles may be fewer")
    if lv.ports == "shared":
        attrs["shared_bandwidth"] = _number(lv.read_words_per_cycle)
        if lv.write_words_per_cycle != lv.read_words_per_cycle:
            notes.append(f"{lv.name}: one shared port at {lv.read_words_per_cycle:g} words "
                         f"per cycle (the write rate {lv.write_words_per_cycle:g} is not a "
                         "Timeloop attribute of a shared port)")
    else:
        for kind, rate in (("read", lv.read_words_per_cycle),
                           ("write", lv.write_words_per_cycle)):
            if rate < UNLIMITED_WORDS_PER_CYCLE:
                attrs[f"{kind}_bandwidth"] = _number(rate)
    if unbounded or outermost:
        cls = "DRAM" if unbounded else "SRAM"
    else:
        cls = "regfile" if lv.capacity_words <= REGFILE_MAX_WORDS else "SRAM"
    return {"class": cls, "attributes": attrs}


def _level_notes(lv: Level, notes: list[str]) -> None:
    """The level's TileFlow conventions that no Timeloop attribute states."""
    if lv.step_overhead_cycles:
        notes.append(f"{lv.name}: step_overhead_cycles {lv.step_overhead_cycles:g} not "
                     "written (Timeloop has no per-step request cost): cycles may be fewer")
    if lv.latency_cycles:
        notes.append(f"{lv.name}: latency_cycles {lv.latency_cycles:g} not written "
                     "(Timeloop has no first-word latency): cycles may be fewer")
    if lv.first_touch_fills:
        reads = "reading" if lv.first_touch_reads_parent else "not reading"
        notes.append(f"{lv.name}: first_touch_fills (outputs filled on first touch, {reads} "
                     "the level above) is a version convention of Timeloop, not an "
                     "attribute: a v0.4 file is read without it, so writes here may be fewer")


def _compute_notes(arch: Architecture, notes: list[str]) -> None:
    """Notes on the accelerator as a whole: conventions, the vector unit, op timings."""
    own = [f"overlap {arch.overlap}"] if arch.overlap != "perfect" else []
    if any(lv.writeback_on_read_port for lv in arch.levels):
        own.append("write-backs on the read port")
    if any(lv.deltas != "timeloop" for lv in arch.levels):
        own.append("exact input deltas")
    if own:
        notes.append(f"TileFlow's conventions of this accelerator ({', '.join(own)}) are not "
                     f"attributes: a Timeloop file is evaluated with Timeloop's "
                     f"({TIMELOOP_CONVENTIONS}); compare with that flag")
    m = arch.matrix
    if any(c != 1.0 for c in m.cycles_per_op.values()):
        notes.append(f"matrix unit: cycles_per_op {dict(m.cycles_per_op)} not written "
                     "(Timeloop's MAC takes one cycle)")
    if not arch.vector_on_matrix:
        v = arch.vector
        notes.append(f"vector unit ({v.rows} lanes at {v.level}, {v.energy_pj_per_op:g} pJ "
                     "per op) not written: Timeloop has one compute unit, the MAC array")
    if any(lv.area_mm2 is not None for lv in arch.levels):
        notes.append("areas from the component model are not written (Accelergy estimates "
                     "its own from the classes and attributes)")


def timeloop_problem(workload: Workload) -> dict:
    """A one-operator multiply-accumulate workload as a Timeloop v0.4 problem; several
    operators are refused, naming them (a Timeloop problem has one)."""
    if len(workload.ops) != 1:
        names = ", ".join(op.name for op in workload.ops)
        raise InputError(f"workload '{workload.name}' has {len(workload.ops)} operators "
                         f"({names}): a Timeloop problem holds one; export a workload of one "
                         "operator (or only the mapping, --out FILE.yaml)")
    op = workload.ops[0]
    if op.update != "+=" or op.function != "mul" or len(op.inputs) != 2:
        raise InputError(f"operator '{op.name}' ({op}) is not a multiply-accumulate of two "
                         "tensors: a Timeloop problem is one")
    coefficients: dict[str, int] = {}
    spaces = []
    for access in (*op.inputs, op.output):
        projection = []
        for axis in access.axes:
            if axis.offset:
                raise InputError(f"operator '{op.name}': index '{axis}' of {access.tensor} "
                                 "has an offset, which a Timeloop projection cannot state")
            terms = []
            for dim, coef in axis.terms:
                if coef == 1:
                    terms.append([dim])
                else:
                    name = f"c{coef}"
                    coefficients[name] = coef
                    terms.append([dim, name])
            projection.append(terms)
        space: dict = {"name": access.tensor, "projection": projection}
        if access is op.output:
            space["read_write"] = True
        spaces.append(space)
    shape: dict = {"name": op.name, "dimensions": list(op.dims)}
    if coefficients:
        shape["coefficients"] = [{"name": k, "default": v} for k, v in coefficients.items()]
    shape["data_spaces"] = spaces
    return {"problem": {"version": "0.4", "shape": shape,
                        "instance": {d: workload.sizes[d] for d in op.dims}}}
