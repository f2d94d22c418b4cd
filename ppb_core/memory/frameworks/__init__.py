"""One module per training framework: what it keeps, shards, buffers and frees (docs/frameworks.md).

`rules_for(run.framework)` is what `ppb_core.memory.MemoryModel` asks; `FrameworkRules` (base.py)
says which questions there are.
"""

from ppb_core.memory.frameworks.base import FrameworkRules
from ppb_core.memory.frameworks.megatron import MegatronRules
from ppb_core.memory.frameworks.mindformers import MindFormersRules
from ppb_core.memory.frameworks.torchtitan import TorchtitanRules

RULES: dict[str, FrameworkRules] = {
    "megatron": MegatronRules(),
    "torchtitan": TorchtitanRules(),
    "mindformers": MindFormersRules(),
}


def rules_for(framework: str) -> FrameworkRules:
    """The rules of *framework* (megatron, torchtitan or mindformers)."""
    try:
        return RULES[framework]
    except KeyError:
        raise ValueError(f"unknown framework {framework!r}; expected one of {', '.join(RULES)}") from None


__all__ = ["RULES", "FrameworkRules", "MegatronRules", "MindFormersRules", "TorchtitanRules", "rules_for"]
