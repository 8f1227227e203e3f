"""The structure search: tile trees as genes, their canonical form, the genetic search, the
fitness of a structure and the data-movement bound."""
