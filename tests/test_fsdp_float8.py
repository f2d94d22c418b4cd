"""torchtitan's Float8 with FSDP2's float8 all-gather, by hand: the block's linear weights gathered at a
byte (torchao float8/fsdp_utils.py `WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`), in the
gathers' time, their copy-out and the backward's working set, and the scale precompute after the step."""

from __future__ import annotations

import pytest
from small_models import ROUND_DEVICE, SMALL_GQA

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory import MemoryModel
from ppb_core.memory.frameworks.torchtitan import TorchtitanRules
from ppb_core.model.walk import walk
from ppb_core.timing.flops import ALL_GATHER
from ppb_core.timing.fsdp_float8 import precompute_scale_seconds
from ppb_core.timing.iteration import _data_links, _dp_collective, fsdp2_copy_seconds
from ppb_core.timing.pricer import TimeModel, float8_weight_cast_bytes

# SMALL_GQA's block: wq and wo 1024², wk and wv 1024·256, w1, w3, w2 1024·2816 (7 Float8Linears); two
# RMSNorm weights of 1024 stay bf16
LINEARS = 2 * 1024**2 + 2 * 1024 * 256 + 3 * 1024 * 2816
NORMS = 2 * 1024
HBM = 1000e9 * 0.5  # ROUND_DEVICE: 1000 GB/s at memory_efficiency 0.5


def _run(gather: bool = True, precompute: bool = False, **timing):
    fp8 = {"matmul_dtype": "fp8", "fp8_recipe": "tensorwise"}
    return parse_run_config(
        {
            "framework": "torchtitan",
            "models": [{"name": "llm", "spec": dict(SMALL_GQA)}],
            "parallel": {"dp": 2, "zero": 3, "fsdp": True},
            "training": {"seq_length": 2048, "micro_batch_size": 1},
            "device": ROUND_DEVICE,
            "timing": {**fp8, "fp8_fsdp_all_gather": gather, "fp8_precompute_scale": precompute, **timing},
        }
    )


def _body(run):
    return next(layer for layer in walk(run) if layer.node == "BODY")


def test_the_block_s_linear_weights_are_gathered_at_a_byte():
    on, off = (MemoryModel(_run(gather)).parameters(_body(_run(gather))) for gather in (True, False))
    assert on.total == off.total == LINEARS + NORMS
    assert (on.float8, off.float8) == (LINEARS, 0)
    assert on.gathered_bytes(2) == LINEARS + 2 * NORMS
    head = MemoryModel(_run()).parameters(next(layer for layer in walk(_run()) if layer.node == "HEAD"))
    assert head.float8 == 0  # the embedding is no nn.Linear


def test_gather_time_and_copy_out_by_hand():
    times = {}
    for gather in (True, False):
        run = _run(gather)
        memory, model = MemoryModel(run), TimeModel(run)
        params = memory.parameters(_body(run))
        links = _data_links(run, model.links, memory)
        times[gather] = _dp_collective(ALL_GATHER, params, 2, links, gathered=True)
        out, reduce_in = fsdp2_copy_seconds(run, params, model.kernels)
        # copy-out reads and writes the gathered unit: 2·(LINEARS·1 + NORMS·2) on, 2·2·(LINEARS + NORMS) off;
        # the reduce-scatter copy-in is the bf16 gradients to fp32 either way, 2 + 4 bytes an element
        gathered = LINEARS + 2 * NORMS if gather else 2 * (LINEARS + NORMS)
        assert out == pytest.approx(2 * gathered / HBM)
        assert reduce_in == pytest.approx(6 * (LINEARS + NORMS) / HBM)
    # ROUND_DEVICE has no latency: an all-gather's time is its bytes', (LINEARS + 2·NORMS) against 2·(LINEARS + NORMS)
    assert times[True] / times[False] == pytest.approx((LINEARS + 2 * NORMS) / (2 * (LINEARS + NORMS)))


def test_backward_working_set_by_hand():
    run = _run()
    memory = MemoryModel(run)
    params = memory.parameters(_body(run))
    got = TorchtitanRules().parameter_working_bytes(params, memory.setup, "BODY", 0, params, params)
    # U gathered (LINEARS + 2·NORMS bytes), U's bf16 gradients 2·P, V prefetched (as U), W's fp32
    # reduce-scatter input 4·P; the post-backward moment (2 + 4)·P + V is smaller
    total = LINEARS + NORMS
    assert got == 2 * (LINEARS + 2 * NORMS) + 2 * total + 4 * total


def test_the_scale_precompute_by_hand():
    run = _run(precompute=True)
    memory, model = MemoryModel(run), TimeModel(run)
    links = _data_links(run, model.links, memory)
    kinds = [layer.kind for layer in walk(run)]  # 4 blocks, the head and the tail (no Float8 weight)
    # the fp32 shards read (4 B × LINEARS/2 a block), then one all-reduce of 4 × 7 amaxes a block over the
    # 2 ranks at NVLink's 100 GB/s × 0.5: 2·(1/2)·112 B each way; ROUND_DEVICE has no latency
    expected = 4 * 4 * LINEARS / 2 / HBM + 4 * 7 * 4 / 50e9
    assert precompute_scale_seconds(kinds, memory.setup, links, model.kernels) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("timing", "field"),
    [
        ({"matmul_dtype": "bf16"}, "timing.fp8_fsdp_all_gather"),
        ({"fp8_recipe": "mxfp8"}, "timing.fp8_fsdp_all_gather"),
    ],
)
def test_the_float8_gather_needs_tensorwise_fp8(timing, field):
    with pytest.raises(InputError) as err:
        _run(**timing)
    assert err.value.field == field


def test_the_precompute_needs_the_float8_gather():
    with pytest.raises(InputError) as err:
        _run(gather=False, precompute=True)
    assert err.value.field == "timing.fp8_precompute_scale"


def test_each_forward_quantizes_the_gathered_bf16_weights_by_hand():
    # torchao Float8Linear.forward (eab345c): the weight's amax (read 2 B) and its cast (read 2, write 1)
    # each forward, unless FSDP gathered it in float8 already: 5·LINEARS bytes more a block's forward,
    # none in the backward (the fp8 copy is saved); the output layer stays bf16
    off, on = _run(gather=False), _run(gather=True)
    assert (float8_weight_cast_bytes(off), float8_weight_cast_bytes(on)) == (5, 0)
    prices = {run is off: TimeModel(run).op_prices(_body(run)) for run in (off, on)}
    forward = {k: sum(p.forward_ms for p in v.values()) for k, v in prices.items()}
    backward = {k: sum(p.backward_ms for p in v.values()) for k, v in prices.items()}
    assert forward[True] - forward[False] == pytest.approx(5 * LINEARS / HBM * 1e3)
    assert backward[True] == pytest.approx(backward[False])
