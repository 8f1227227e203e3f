"""Design-space exploration: structures with factor slots, batched evaluation, searches."""
