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


def baselines_for(w: Workload) -> tuple[str, ...]:
    """The named dataflows that apply to this workload (Layerwise applies to every one)."""
    if any(op.carried for op in w.ops):
        return ONLINE
    try:
        conv.conv_chain_ops(w)
        return CONV
    except InputError:
        pass
    try:
        chain.Roles.of(w)
        return CHAIN
    except InputError:
        return ("layerwise",)


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
