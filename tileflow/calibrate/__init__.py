"""Calibration, one module for every campaign: declared parameters with physical bounds, a
deterministic fit on a log scale with held-out validation, accuracy metrics, bound flags."""
