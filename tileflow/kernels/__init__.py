"""Real kernels that follow a dataflow tree: C for the CPU, CUDA for NVIDIA GPUs, a NumPy
reference to check them, timing and cache-simulator traffic measurement."""
