"""The factor space of one structure: slots, limits, completion, pruning bounds and exhaustive
enumeration."""
