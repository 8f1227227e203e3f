"""`tileflow sweep`: an exploration at every point of a sweep of accelerator parameters."""
