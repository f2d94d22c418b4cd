"""Megatron's selective recompute modules rerun their own part of a layer only: "mlp" a dense layer's MLP
(transformer_layer.py `TransformerLayer.__init__`: `if not self.is_moe_layer: self.recompute_mlp = True`),
"moe_act" the routed experts' activation (moe/experts.py `activation_recompute`; the shared experts are an
`MLP`, which reads no module), "shared_experts" the shared experts whole (Megatron-LM 0d8e0714cd, 2edffadb52,
d98e8a64). ppb's `ffAct` switch, which each of them sets, is one for every activation of a layer."""

from __future__ import annotations

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import walk
from ppb_core.timing.pricer import TimeModel

# a layer's parts by op name (ppb_core.timing.flops `_ffn`: up projection, activation, down projection)
DENSE_MLP = {"mlp_in", "mlp_act", "mlp_out"}


def _run(modules: list[str], mtp_layers: int = 0):
    """Two layers, the first dense (first_k_dense_replace 1), the second MoE with a shared expert."""
    return parse_run_config(
        {
            "framework": "megatron",
            "models": [
                {
                    "name": "llm",
                    "spec": {
                        "vocab_size": 32000,
                        "hidden_size": 1024,
                        "num_layers": 2,
                        "num_attention_heads": 8,
                        "num_key_value_heads": 8,
                        "intermediate_size": 4096,
                        "num_experts": 8,
                        "experts_per_token": 2,
                        "moe_intermediate_size": 512,
                        "shared_experts": 1,
                        "first_dense_layers": 1,
                        "mtp_layers": mtp_layers,
                    },
                }
            ],
            "parallel": {"dp": 8, "ep": 8, "zero": 1},
            "training": {
                "seq_length": 2048,
                "micro_batches": 1,
                "recompute": {"granularity": "selective", "modules": modules},
            },
            "device": {"name": "h100-80gb"},
        }
    )


def _reruns(modules: list[str]) -> dict[str, set[str]]:
    """Each body layer kind's rerun ops, by name."""
    run = _run(modules)
    model = TimeModel(run)
    return {
        layer.kind.name: {op.name for op in model._rerun(layer, LayerType.SEL_REC_LAYER, None)}
        for layer in walk(run)
        if layer.node == "BODY"
    }


def test_mlp_recomputes_the_dense_layer_s_mlp_and_nothing_of_a_moe_layer():
    reruns = _reruns(["mlp"])
    dense, moe = (reruns[kind] for kind in sorted(reruns, key=lambda kind: "moe" in kind))
    assert dense >= DENSE_MLP
    assert moe == set()  # not the experts' activation, not the shared expert's


def test_moe_act_recomputes_the_routed_experts_activation_only():
    reruns = _reruns(["moe_act"])
    dense, moe = (reruns[kind] for kind in sorted(reruns, key=lambda kind: "moe" in kind))
    assert dense == set()  # a dense MLP's activation is kept
    assert "experts_act" in moe and "shared_act" not in moe


@pytest.mark.parametrize("modules", [["shared_experts"], ["moe_act", "shared_experts"]])
def test_shared_experts_replays_the_shared_expert_whole(modules):
    reruns = _reruns(modules)
    dense, moe = (reruns[kind] for kind in sorted(reruns, key=lambda kind: "moe" in kind))
    assert dense == set()
    assert {"shared_in", "shared_act", "shared_out"} <= moe
    assert ("experts_act" in moe) == ("moe_act" in modules)


def test_an_mtp_layer_s_transformer_layer_recomputes_as_the_decoder_s():
    # multi_token_prediction.py builds its transformer layer from the decoder's spec and config: "moe" replays
    # its MoE layer whole (router, dispatch, experts, combine, shared expert), whose ops carry the prefix mtp0.
    run = _run(["moe"], mtp_layers=1)
    model = TimeModel(run)
    (mtp,) = [layer for layer in walk(run) if "mtp" in layer.kind.name]
    rerun = {op.name for op in model._rerun(mtp, LayerType.SEL_REC_LAYER, None)}
    assert {"mtp0.router", "mtp0.dispatch", "mtp0.experts_in", "mtp0.experts_out", "mtp0.shared_out"} <= rerun
