"""The CPU campaign's configuration: which workloads and shapes, how many dataflows, on
which thread counts, how they are sampled and timed; read from a YAML file with line
numbers in every error."""

from __future__ import annotations

from dataclasses import dataclass, field

from tileflow.errors import InputError
from tileflow.specs.yamlfile import Field, load_yaml

DEFAULT_WORKLOADS = {
    "gemm-chain": {"b": 1, "m": 256, "l": 256, "k": 64, "n": 64},
    "attention": {"b": 1, "m": 256, "l": 256, "k": 64, "n": 64},
}


@dataclass(frozen=True)
class CampaignConfig:
    # per workload: its sizes, or a list of sizes (several shapes of the same workload)
    workloads: dict[str, dict[str, int] | list[dict[str, int]]] = field(
        default_factory=lambda: dict(DEFAULT_WORKLOADS))
    points: int = 200  # dataflows per workload shape
    arch: str = "host"
    # every chosen dataflow is timed at each thread count (a row per (key, threads))
    threads: tuple[int, ...] = (1,)
    warmup: int = 1
    repetitions: int = 7
    seed: int = 0
    traffic: bool = True  # cachegrind
    first_level: str = "L1"
    last_level: str = "L2"  # the last level of one core's own hierarchy
    # the fraction of the random dataflows sampled one step away from the model's picks
    near_picks: float = 0.0
    # with traffic on: measure cachegrind traffic on this many random rows only (0: all)
    traffic_sample: int = 0
    compile_workers: int = 2  # processes of the compile pass that precedes the timing

    def shapes(self) -> list[tuple[str, dict[str, int]]]:
        """(workload, sizes) of every shape measured, in the config's order."""
        return [(name, sizes) for name, value in self.workloads.items()
                for sizes in (value if isinstance(value, list) else [value])]


def load_config(path: str | None, points: int | None = None) -> CampaignConfig:
    """The campaign from a YAML file (every key optional), validated with line numbers."""
    config = CampaignConfig()
    if path:
        f = Field(load_yaml(path), str(path))
        f.check_keys({"workloads", "points", "arch", "threads", "warmup", "repetitions", "seed",
                      "traffic", "first_level", "last_level", "near_picks", "traffic_sample",
                      "compile_workers"})
        workloads = dict(config.workloads)
        if f.has("workloads"):
            workloads = {}
            for name, value in f.child("workloads").items():
                if isinstance(value.data, list):
                    workloads[str(name)] = [{k: sizes.integer(k) for k in sizes.keys()}
                                            for sizes in value.elements()]
                else:
                    value.require_mapping()
                    workloads[str(name)] = {k: value.integer(k) for k in value.keys()}
        traffic = f.get("traffic", True)
        if not isinstance(traffic, bool):
            raise f.error(f"'traffic' must be true or false, got {traffic!r}", "traffic")
        config = CampaignConfig(
            workloads, f.integer("points", config.points), f.string("arch", config.arch),
            _threads(f), f.integer("warmup", 1, minimum=0),
            f.integer("repetitions", 7), f.integer("seed", 0, minimum=0), traffic,
            f.string("first_level", "L1"), f.string("last_level", "L2"), _fraction(f),
            f.integer("traffic_sample", 0, minimum=0), f.integer("compile_workers", 2))
    if points is not None:
        if points < 1:
            raise InputError(f"--points must be at least 1, got {points}")
        config = CampaignConfig(**{**config.__dict__, "points": points})
    return config


def _threads(f: Field) -> tuple[int, ...]:
    """`threads`: one thread count or a list of them, each an integer from 1 to 1,024."""
    if not f.has("threads"):
        return (1,)
    value = f.child("threads")
    items = value.elements() if isinstance(value.data, list) else [value]
    if not items:
        raise f.error("'threads' must be a thread count or a non-empty list of them",
                      "threads")
    counts = tuple(item.as_integer("threads", 1, 1024) for item in items)
    if len(set(counts)) != len(counts):
        raise f.error(f"'threads' lists a count twice: {list(counts)}", "threads")
    return counts


def _fraction(f: Field) -> float:
    """`near_picks`: a number from 0 to 1."""
    value = f.get("near_picks", 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise f.error(f"'near_picks' must be a number from 0 to 1 (the fraction of the random "
                      f"dataflows sampled near the model's picks), got {value!r}", "near_picks")
    return float(value)
