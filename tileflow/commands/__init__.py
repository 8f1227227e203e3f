"""What the command line runs, one module per command family; `tileflow.cli` parses and
dispatches to them."""
