"""TransformerEngine's userbuffers overlap (Megatron's --tp-comm-overlap): ring exchange and pipeline, by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from small_models import ROUND_DEVICE

from ppb_core.cli.main import main
from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.walk import walk
from ppb_core.timing.comm import Links, hop_seconds, one_shot_seconds
from ppb_core.timing.flops import ALL_GATHER, REDUCE_SCATTER, Collective
from ppb_core.timing.kernels import Kernels
from ppb_core.timing.pricer import TimeModel
from ppb_core.timing.userbuffers import pipeline_s, ring_exchange_s, rs_reduce_s

# 64 SMs at 1e14 FLOP/s and a ceiling of 0.5: 7.8125e11 FLOP/s a SM. A 128×128 tile over k = 1024 takes
# 2·128·128·1024 / 7.8125e11 = 42.95 us; comm kernels take 16 of the 64 SMs (contention 0.25).
KERNELS = Kernels(
    flops_per_s=1e14,
    gemm_ceiling=0.5,
    sms=64,
    hbm_bytes_per_s=5e11,
    attention_forward=0.5,
    attention_backward=0.5,
    comm_sms=16,
)
TILE_S = 2 * 128 * 128 * 1024 / 7.8125e11


def test_a_ring_exchange_runs_its_chunks_together_unless_the_ring_is_slower():
    # 2048×1024 by 1024×2048 over tp 4: chunks of 512 rows, 4·64 = 256 tiles of 128×128 over 64 SMs,
    # 4 waves (171.8 us, the plain GEMM's FLOPs / 5e13); the last chunk alone is 64 tiles, one wave.
    together = 4 * TILE_S
    assert together == pytest.approx(2 * 2048 * 2048 * 1024 / 5e13)
    # Hops of 30 us: 3·30 + 42.95 = 132.9 us < 171.8: the chunks' work sets the time.
    assert ring_exchange_s(KERNELS, 2048, 2048, 1024, 4, 30e-6) == pytest.approx(together)
    # Hops of 50 us: the ring brings the last shard at 150 us, then its chunk: 192.95 us.
    assert ring_exchange_s(KERNELS, 2048, 2048, 1024, 4, 50e-6) == pytest.approx(3 * 50e-6 + TILE_S)
    # A fixed kernel time counts once for the chunks together and once for the last chunk alone.
    fixed = dataclasses.replace(KERNELS, kernel_s=5e-6)
    assert ring_exchange_s(fixed, 2048, 2048, 1024, 4, 30e-6) == pytest.approx(together + 5e-6)
    assert ring_exchange_s(fixed, 2048, 2048, 1024, 4, 50e-6) == pytest.approx(3 * 50e-6 + TILE_S + 5e-6)


def test_a_pipelined_reduce_scatter_steps_at_the_slower_of_a_chunk_and_its_reduce_scatter():
    # 2048×1024 by 1024×2048 in 4 column chunks of 512: 16·4 = 64 tiles, one wave, 42.95 us each.
    g = TILE_S
    # Reduce-scatters of 60 us, longer than a chunk beside one (42.95·1.25 = 53.7 us): each waits for
    # the one before, and the next chunk starts when it starts. G0 ends at g; the four reduce-scatters
    # then run back to back: g + 4·60 us.
    assert pipeline_s(KERNELS, 2048, 2048, 1024, 60e-6) == pytest.approx(g + 4 * 60e-6)
    # Reduce-scatters of 20 us: each chunk after the first runs beside one, 42.95 + 0.25·20 = 47.95 us;
    # the last reduce-scatter follows the last chunk: g + 3·47.95 + 20.
    assert pipeline_s(KERNELS, 2048, 2048, 1024, 20e-6) == pytest.approx(g + 3 * (g + 0.25 * 20e-6) + 20e-6)


def _megatron_sp_run(overlap_tp: float, tp: int = 4, methods: dict | None = None):
    spec = {
        "vocab_size": 4096,
        "hidden_size": 2048,
        "num_layers": 2,
        "num_attention_heads": 16,
        "intermediate_size": 8192,
        "activation": "gelu",
        "norm": "layernorm",
        "position_embedding": "rope",
        "max_position_embeddings": 2048,
    }
    device = dict(ROUND_DEVICE, comm_sms=16)
    raw = {
        "name": "ub",
        "framework": "megatron",
        "models": [{"name": "llm", "spec": spec}],
        "parallel": {"tp": tp, "sequence_parallel": True},
        "training": {"seq_length": 2048, "flash_attention": True},
        "device": device,
        "timing": {"overlap": {"tp": overlap_tp}, "tp_comm_overlap_methods": methods or {}},
    }
    return parse_run_config(raw)


def test_megatron_s_tp_comm_overlap_prices_the_layer_gemms_userbuffers_methods():
    run = _megatron_sp_run(1.0)
    model = TimeModel(run)
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    prices = model.op_prices(layer)
    links = Links.from_run(run)
    # fc1's forward all-gather: 2048 tokens × 2048 × 2 bytes = 8,388,608 gathered; a hop carries a
    # quarter at 5e10 B/s (100 GB/s at 0.5): 41.9 us. fc1 (2048×2048 by 2048×2048 a rank) runs its four
    # 512-row chunks together in 2·2048·2048·2048/5e13 = 343.6 us, the ring 3·41.9 us + one chunk
    # (64 tiles of 128×128 over k = 2048: one wave, 85.9 us) = 211.7 us: the ring adds nothing.
    gather = Collective(ALL_GATHER, "tp", 8_388_608, "tp")
    assert hop_seconds(gather, links) == pytest.approx(8_388_608 / 4 / 5e10)
    assert prices["gather_mlp"].forward_ms == pytest.approx(0.0)
    # fc2's forward reduce-scatter, pipelined in four column chunks of 512 (2048×8192/4 by 8192×512:
    # 16·4 = 64 tiles over k = 8192, one wave of 343.6 us each), each chunk's reduce-scatter one
    # kernel: a quarter of 8,388,608 bytes, 3/4 of it received, at 5e10 B/s: 31.5 us, under a chunk:
    # the chunks run back to back, the last three beside a reduce-scatter (+0.25·31.5 us each), and
    # the last reduce-scatter follows: 4·343.6 + 3·7.9 + 31.5 us; less the plain GEMM's 1374.4 us.
    chunk = 2 * 2048 * 512 * 8192 / 5e13
    comm = 8_388_608 / 4 * 3 / 4 / 5e10
    assert one_shot_seconds(Collective(REDUCE_SCATTER, "tp", 8_388_608 / 4, "tp"), links) == pytest.approx(comm)
    assert prices["reduce_mlp"].forward_ms == pytest.approx((3 * 0.25 * comm + comm) * 1e3)
    assert 4 * chunk == pytest.approx(2 * 2048 * 2048 * 8192 / 5e13)
    # Without --tp-comm-overlap (overlap.tp 0) the same collectives sit on the critical path whole.
    plain = TimeModel(_megatron_sp_run(0.0)).op_prices(layer)
    assert plain["gather_mlp"].forward_ms > prices["gather_mlp"].forward_ms
    assert plain["reduce_mlp"].forward_ms > prices["reduce_mlp"].forward_ms


def test_a_configured_ring_exchange_reduce_scatter_sums_its_chunks_after():
    # --tp-comm-overlap-cfg with fc2_fprop: {method: ring_exchange} (Megatron CI's tensorwise tp2_pp2 case):
    # TE's CommOverlapP2PBase::split_overlap_rs runs fc2 as 4 row chunks of 512 (2048 × 2048 cols over k 8192:
    # 64 tiles, one wave, 343.6 us each), sending each while the next computes: together they are the plain
    # GEMM (4 waves), the ring 3 hops of 41.9 us + one chunk, under it: nothing added; then reduce_bf16 reads
    # the 4 received chunks (the whole 8,388,608 bytes) and writes the 2,097,152-byte shard at 5e11 B/s:
    # 10,485,760 / 5e11 = 20.97 us, the forward's whole price. proj_fprop keeps its default pipeline.
    run = _megatron_sp_run(1.0, methods={"fc2_fprop": "ring_exchange"})
    layer = next(layer for layer in walk(run) if layer.node == "BODY")
    prices = TimeModel(run).op_prices(layer)
    assert prices["reduce_mlp"].forward_ms == pytest.approx(10_485_760 / 5e11 * 1e3)
    default = TimeModel(_megatron_sp_run(1.0)).op_prices(layer)
    assert prices["reduce_attention"].forward_ms == pytest.approx(default["reduce_attention"].forward_ms)
    assert rs_reduce_s(KERNELS, 8_388_608, 4) == pytest.approx(10_485_760 / 5e11)
    # bulk for an all-gather GEMM: the generic overlap share, no userbuffers method
    bulk = TimeModel(_megatron_sp_run(1.0, methods={"fc1_fprop": "bulk"})).op_prices(layer)
    assert bulk["gather_mlp"].forward_ms != pytest.approx(default["gather_mlp"].forward_ms)


def test_a_pipelined_all_gather_is_refused_as_te_does():
    # TE initialize_ub (d0067d0d): "`pipeline` overlap method is not supported for AllGather"
    with pytest.raises(InputError) as caught:
        _megatron_sp_run(1.0, methods={"qkv_fprop": "pipeline"})
    assert caught.value.field == "timing.tp_comm_overlap_methods.qkv_fprop"


@pytest.mark.parametrize(
    ("parallel", "said"),
    [
        ({"sequence_parallel": False}, "it is off"),
        ({"dp": 16, "tp": 1, "sequence_parallel": True}, "tp is 1"),
    ],
)
def test_tp_comm_overlap_without_sequence_parallelism_is_refused_in_one_line(tmp_path, capsys, parallel, said):
    # Megatron-LM's validate_args asserts sequence parallelism for --tp-comm-overlap (arguments.py, from
    # 116ffddc58 2023-10-23 to d98e8a64) and turns sequence parallelism off at tensor parallel 1 just before
    configs = Path(__file__).parent.parent / "configs"
    raw = yaml.safe_load((configs / "llama3-8b.yaml").read_text())
    raw["models"][0]["config"] = str(configs / raw["models"][0]["config"])
    raw["parallel"].update(parallel)
    raw["timing"] = {"overlap": {"tp": 1.0}}
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump(raw))
    code = main(["estimate", str(run)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"{run}: timing.overlap.tp: is Megatron's --tp-comm-overlap" in err and said in err
