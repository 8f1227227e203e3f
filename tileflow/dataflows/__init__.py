"""Named baseline dataflows, built programmatically for any sizes and accelerator."""

from tileflow.dataflows.registry import BASELINES, baselines_for, build

__all__ = ["BASELINES", "baselines_for", "build"]
