"""The census: activation memory measured from real PyTorch layers (docs/census.md).

`ppb census HF_CONFIG.json --out census.json` builds each body kind with `transformers` and
measures what autograd keeps (`measure`, the only module that imports torch), attributes it to
ops, switches and tensor-parallel sides (`attribution`), fits bytes per token (`fit`) and writes
the census file (`record`). A run config naming the file as `models[i].census` has the memory
model price that model's body activations from it (`ppb_core.memory.census`);
`ppb_core.estimate.census` puts the formula path and a census side by side. The census reads
nothing of the memory model: memory depends on it, never the other way.
"""

from ppb_core.census.record import Census, KindActivations, KindCensus, read_census

__all__ = ["Census", "KindActivations", "KindCensus", "read_census"]
