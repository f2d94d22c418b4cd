"""The model as ppb sees it: recompute switches, layer kinds, parameter counts, the layer walk."""
