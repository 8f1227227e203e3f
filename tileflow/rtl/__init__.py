"""Model accuracy against the RTL-measured systolic accelerator (../shared/datasets/rtl-systolic)."""
