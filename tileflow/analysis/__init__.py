"""The tile-tree analysis: data movement, footprints and operation counts. Knows no files."""
