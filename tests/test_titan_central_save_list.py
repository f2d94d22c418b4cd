"""torchtitan's per-op checkpointing from 114151ad4 saves by one central list (`Geometry.central_save_list`).

pytorch/torchtitan 114151ad4 (2026-03-23, #2357, "Centralize selective AC policy and remove per-model op save
lists"), distributed/activation_checkpoint.py `_get_save_ops`: MUST_SAVE for torch's
`get_default_op_list().compute_intensive_ops` (torch 2.13: mm, addmm, bmm, _scaled_mm, the SDPA flash and
efficient kernels, ...), aten.linear, the other SDPA kernels, max, flex attention, `reduce_scatter_tensor` and
`all_to_all_single` for every model; `wrapped_policy` alternates only mm and linear (`mm_ops`). v0.2.2's
lists (models/*/infra/parallelize.py `_op_sac_save_list`, read at 114151ad4^) held no addmm, and Qwen3's
no all_to_all_single. So from that commit:
* a linear with a bias (aten.addmm) is saved, still uncounted;
* Qwen3's expert dispatch and combine (all_to_all_single) are saved, not sent again in the recompute.
"""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.memory.frameworks.torchtitan import op_policy_saves, op_policy_terms
from ppb_core.memory.setup import MemorySetup
from ppb_core.model.walk import walk
from ppb_core.timing.flops import op_policy_rerun
from ppb_core.timing.pricer import TimeModel

BEFORE, AFTER = "2026-03-22", "2026-03-23"  # 114151ad4's date


def _run(release: str, spec: dict, parallel: dict) -> object:
    return parse_run_config(
        {
            "name": "r",
            "framework": "torchtitan",
            "framework_release": {"torchtitan": release},
            "models": [{"name": "llm", "spec": spec}],
            "parallel": {"zero": 3, "fsdp": True, **parallel},
            "training": {"seq_length": 2048, "micro_batch_size": 1, "recompute": {"mode": "selective", "option": "op"}},
            "device": ROUND_DEVICE,
        }
    )


def _body(run: object) -> object:
    return next(layer for layer in walk(run) if layer.node == "BODY")


def test_a_biased_projection_is_saved_from_114151ad4():
    # wq, wk, wv with biases run aten.addmm (uncounted): wo 1, w1 2, w3 3, w2 4 count, wo and w3 saved either
    # way; from 114151ad4 wq, wk, wv are saved too: 2048 tokens · (1024 + 256 + 256) more elements kept
    spec = {**SMALL_GQA, "attention_bias": True}
    saves, kept = {}, {}
    for release in (BEFORE, AFTER):
        run = _run(release, spec, {"dp": 2})
        setup = MemorySetup.from_run(run)
        saves[release] = op_policy_saves(_body(run).kind, setup)
        kept[release] = sum(term.elements for term in op_policy_terms(_body(run).kind, setup))
    assert saves[BEFORE] == {
        "attention.wq_output": False,
        "attention.wk_output": False,
        "attention.wv_output": False,
        "attention.wo_output": True,
        "mlp.w1_output": False,
        "mlp.w3_output": True,
        "mlp.w2_output": False,
    }
    assert saves[AFTER] == {**saves[BEFORE], "attention.wq_output": True, "attention.wk_output": True,
                            "attention.wv_output": True}  # fmt: skip
    assert kept[AFTER] - kept[BEFORE] == 2048 * (1024 + 256 + 256)
    # unbiased, nothing moves
    plain = [op_policy_saves(_body(r).kind, MemorySetup.from_run(r)) for r in (_run(d, SMALL_GQA, {"dp": 2})
                                                                            for d in (BEFORE, AFTER))]  # fmt: skip
    assert plain[0] == plain[1]


QWEN3_MOE = {**SMALL_GQA, "qk_norm": True, "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 512}


def test_qwen3_s_expert_all_to_alls_are_saved_from_114151ad4():
    # EP 2 over dp 2, balanced routing: 2048 tokens × top-2 = 4096 rows sent, as many received, and back
    terms, rerun = {}, {}
    for release in (BEFORE, AFTER):
        run = _run(release, QWEN3_MOE, {"dp": 2, "ep": 2})
        kind = _body(run).kind
        terms[release] = {term.op: term.elements for term in op_policy_terms(kind, MemorySetup.from_run(run))}
        model = TimeModel(run)
        body = _body(model.run)
        rerun[release] = {op.name for op in op_policy_rerun(model.ops(body), kind, model._geometry)}
    assert "moe.dispatched_tokens" not in terms[BEFORE]
    assert terms[AFTER]["moe.dispatched_tokens"] == terms[AFTER]["moe.combined_tokens"] == 4096 * 1024
    # the recompute sends them again before, not after
    sent = {name for name in rerun[BEFORE] - rerun[AFTER]}
    assert sent and all("a2a" in name or "dispatch" in name or "combine" in name for name in sent)


@pytest.mark.parametrize("release", [None, BEFORE])
def test_v0_2_2_and_before_114151ad4_are_unchanged(release):
    raw_release = {"torchtitan": release} if release else {}
    run = parse_run_config(
        {
            "name": "r",
            "framework": "torchtitan",
            **({"framework_release": raw_release} if raw_release else {}),
            "models": [{"name": "llm", "spec": QWEN3_MOE}],
            "parallel": {"dp": 2, "ep": 2, "zero": 3, "fsdp": True},
            "training": {"seq_length": 2048, "micro_batch_size": 1, "recompute": {"mode": "selective", "option": "op"}},
            "device": ROUND_DEVICE,
        }
    )
    assert not MemorySetup.from_run(run).central_save_list
