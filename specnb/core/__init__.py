"""Model math and plumbing that needs no weights: FLOPs per token from a config, Leviathan's
formulas, sampling and left padding, the reference run's figures, devices, the hub check, typed
errors and the data paths."""
