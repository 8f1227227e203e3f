"""The named baselines and which workloads they apply to."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tileflow.dataflows import chain, conv, online
from tileflow.errors import InputError
from tileflow.specs.arch import Architecture
from tileflow.specs.workload import Workload
from tileflow.tree import Dataflow

Builder = Callable[[Workload, Architecture, Mapping[str, int] | None], Dataflow]

CHAIN = ("layerwise", "uni-pipe", "flat-hgran", "flat-rgran", "chimera", "tileflow-pipe")
CONV = ("layerwise", "fused-layer", "isos")
ONLINE = ("layerwise", "flash", "flash-pipe")

BASELINES: dict[str, Builder] = {
    "layerwise": chain.layerwise,
    "uni-pipe": chain.uni_pipe,
    "flat-hgran": chain.flat_hgran,
    "flat-rgran": chain.flat_rgran,
    "chimera": chain.chimera,
    "tileflow-pipe": chain.tileflow_pipe,
    "fused-layer": conv.fused_layer,
    "isos": conv.isos,
    "flash": online.flash,
    "flash-pipe": online.flash_pipe,
}


def role(w: Workload) -> str:
    """What the workload is, by its operators' roles (never by its number of dimensions):
    "online" (state carried across a reduction: online softmax), "conv" (two windowed
    matrix operators in a chain, `conv.ConvRoles`), "chain" (two matrix contractions with
    vector stages between them: attention, GEMM chains, MLPs; head dims of any number,
    `chain.Roles`) or "other"."""
    if any(op.carried for op in w.ops):
        return "online"
    for name, recognise in (("conv", conv.ConvRoles.of), ("chain", chain.Roles.of)):
        try:
            recognise(w)
            return name
        except InputError:
            pass
    return "other"


def baselines_for(w: Workload) -> tuple[str, ...]:
    """The named dataflows that apply to this workload (Layerwise applies to every one). A
    convolution chain with vector stages between its convolutions (an activation) is a chain
    of contractions too: the chain's dataflows, which can run those stages apart (Seq, Pipe),
    come after the conv ones, which hold every stage of a step at once (Shar)."""
    kind = role(w)
    if kind == "conv" and len(w.ops) > 2 and _is_chain(w):
        return CONV + CHAIN[1:]
    return {"online": ONLINE, "conv": CONV, "chain": CHAIN}.get(kind, ("layerwise",))


def _is_chain(w: Workload) -> bool:
    try:
        chain.Roles.of(w)
        return True
    except InputError:
        return False


def build(name: str, w: Workload, arch: Architecture,
          tiles: Mapping[str, int] | None = None) -> Dataflow:
    key = name.lower()
    if key not in BASELINES:
        raise InputError(f"unknown dataflow '{name}': give a YAML file or one of "
                         f"{', '.join(BASELINES)}")
    if key not in baselines_for(w):
        raise InputError(f"dataflow '{name}' does not apply to workload '{w.name}'; "
                         f"it has: {', '.join(baselines_for(w))}")
    return BASELINES[key](w, arch, tiles)
