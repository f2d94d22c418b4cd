"""Strategy search: the parallel layouts of a model on N devices, enumerated, screened by proven bounds,
balanced and ranked by throughput (docs/search.md)."""
