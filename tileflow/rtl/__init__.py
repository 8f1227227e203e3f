"""Model accuracy against the RTL-measured systolic accelerator of shared/datasets."""
