"""The batched evaluator: a structure compiled once (`compiled`), evaluated over arrays of factor
rows (`batch`)."""
