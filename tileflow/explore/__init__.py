"""Design-space exploration, one subpackage per layer (each imports only those before it):
`factors` (the factor space of one structure), `tilesearch` (the tile-factor search),
`structures` (the structure search), `studies` (`tileflow explore`), `sweeps`
(`tileflow sweep`). The batched evaluator they call is `tileflow.evaluator`."""
