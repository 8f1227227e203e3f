"""The tile-factor search over one structure's space (MCTS, random, TPE) and fitted baselines."""
