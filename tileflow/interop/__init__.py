"""Files of other tools: Timeloop architectures, problems and mappings, and the original
TileFlow's problems and mappings, read into TileFlow's accelerators, workloads and
dataflows (`tileflow.interop.files`), and single-operator trees written back as Timeloop
mappings (`tileflow.interop.export`). Conventions and limits: docs/interop.md."""
