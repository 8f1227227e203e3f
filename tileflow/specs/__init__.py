"""Input specifications: workloads, accelerators, and their YAML files."""
