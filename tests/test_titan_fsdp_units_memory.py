"""torchtitan's FSDP2 units by version on the memory side (`timing.fsdp_units`, as the time side's
ppb_core/timing/titan_step.py): `split` (83e694105 on, v0.2.2 `apply_fsdp`) against `root` (before
it: 83e694105^ models/llama3/infra/parallelize.py, the last block not resharded after the forward and
`fully_shard(model, reshard_after_forward=not pp_enabled)` the root of the embedding, final norm and
output layer). Hand counts on DENSE (tests/test_memory_runs.py): HEAD 65536 (1024·64), each of the 4
blocks 41088, TAIL 65600 (norm 64 + output 65536); bf16 gathers (bc 2), fp32 reduce-scatters (4)."""

from __future__ import annotations

import pytest
from test_memory_runs import DENSE, layers, make_run, model

from ppb_core.config.run import FrameworkRelease, parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory import stage_peaks
from ppb_core.model.switches import LayerType
from ppb_core.model.walk import KindSlot, walk

NOT = LayerType.NOT_REC_LAYER
ROOT = {"fsdp_units": "root"}
# the root gathered again at the logits' backward (2·65536 + 2·65600) and the output layer's and final
# norm's bf16 gradients (2·65600), held to the final callback
ROOT_HELD = 2 * 65536 + 2 * 65600 + 2 * 65600


def _titan(**kwargs):
    return make_run(DENSE, framework="torchtitan", **kwargs)


def _slot(layer):
    return KindSlot(layer.model_name, layer.node, layer.kind, 1)


def test_root_units_hold_the_root_through_the_backward():
    assert ROOT_HELD == 393472
    run = _titan(parallel={"dp": 2}, timing=ROOT)
    memory, found = model(run), layers(run)
    block, head, tail = found["dense"], found["HEAD"], found["TAIL"]
    # a middle block (V, W blocks): split's max(10·41088, 8·41088) + the root's 393472, + the block's
    # largest gradient 32768 (as in test_frameworks' split case)
    middle = memory.working_extra_bytes(block, NOT, None, 2, True, neighbours=(_slot(block), _slot(block)))
    assert middle == 32768 + 10 * 41088 + ROOT_HELD
    # the first block: the embedding is in the root, not prefetched: max(4·41088 + 4·41088, 6·41088)
    first = memory.working_extra_bytes(block, NOT, None, 2, True, neighbours=(_slot(head), _slot(block)))
    assert first == 32768 + 8 * 41088 + ROOT_HELD
    # the last block: no output-layer reduce-scatter input to wait on (the root reduces last):
    # max(4·41088 + 2·41088, 6·41088 + 2·41088)
    last = memory.working_extra_bytes(block, NOT, None, 2, True, neighbours=(_slot(block), _slot(tail)))
    assert last == 32768 + 8 * 41088 + ROOT_HELD
    # split, the same last block: 4·41088 + 2·41088 + 4·65600 (test_frameworks' rule)
    split = _titan(parallel={"dp": 2})
    found_split = layers(split)
    assert (
        model(split).working_extra_bytes(
            found_split["dense"], NOT, None, 2, True, neighbours=(_slot(block), _slot(found_split["TAIL"]))
        )
        == 32768 + 6 * 41088 + 4 * 65600
    )


def test_root_units_the_embedding_backward_and_the_final_callback():
    run = _titan(parallel={"dp": 2}, timing=ROOT)
    memory, found = model(run), layers(run)
    head, block = found["HEAD"], found["dense"]
    # the embedding's backward: the root held, its 2·65536 gradients forming, block 0's fp32 reduce-scatter
    # input 4·41088: 393472 + 131072 + 164352 = 688896; the final callback: root resharded, its gradients
    # (2·(65536 + 65600)) and fp32 input (4·(65536 + 65600)): 786816, the larger; + the incoming gradient
    # 64·64·2 = 8192
    params = memory.rules.parameter_working_bytes(
        memory.parameters(head), memory.setup, "HEAD", 2, None, memory.parameters(block), beside=(None, "BODY")
    )
    assert params == max(ROOT_HELD + 131072 + 164352, 6 * (65536 + 65600)) == 786816


def test_root_units_the_stage_and_the_loss():
    run = _titan(parallel={"dp": 2}, timing=ROOT)
    memory = model(run)
    # the loss: the root resharded after the model's forward, the last block not: 8·64·1024 + 2·41088
    # (split: the norm and output unit, 2·65600)
    assert memory.loss_bytes(layers(run)["TAIL"], _slot(layers(run)["dense"])) == 8 * 64 * 1024 + 2 * 41088
    split = _titan(parallel={"dp": 2})
    assert model(split).loss_bytes(layers(split)["TAIL"]) == 8 * 64 * 1024 + 2 * 65600
    (peak,) = stage_peaks(memory, walk(run), [[1]], 80 * 2**30)
    assert peak.loss_bytes == 8 * 64 * 1024 + 2 * 41088
    # the backward: a middle block's 32768 + 10·41088 + 393472 = 837120, after the TAIL's backward freed
    # its kept 279040 (test_frameworks): 558080; the TAIL's own, 131072 + 393472 + 2·41088 − 262144 =
    # 344576, and the embedding's 8192 + 786816 − 279040 = 515968, are below it
    assert peak.working_bytes == 32768 + 10 * 41088 + ROOT_HELD - 279040 == 558080
    (split_peak,) = stage_peaks(model(split), walk(split), [[1]], 80 * 2**30)
    assert split_peak.working_bytes == 344704  # test_frameworks' split figure


def test_before_pytorch_2_8_the_root_stays_gathered_through_the_loss():
    # torch ≤ 2.7 _fsdp_state.py `_lazy_init` set the root's post_forward_mesh_info = None whatever
    # reshard_after_forward said (pytorch/pytorch#154704, #155319 made 2.8 honour a stated True): the loss
    # runs beside the gathered embedding (2·65536) and final norm with output layer (2·65600) as well as
    # the last block (2·41088): 8·64·1024 + 2·41088 + 262272
    run = _titan(parallel={"dp": 2}, timing=ROOT)
    tail, last = layers(run)["TAIL"], _slot(layers(run)["dense"])
    for version, root_gathered in (("2.7", 2 * (65536 + 65600)), ("2.6.0a0+1963fc8", 262272), ("2.8", 0)):
        old = run.model_copy(update={"framework_release": FrameworkRelease(pytorch=version)})
        assert model(old).loss_bytes(tail, last) == 8 * 64 * 1024 + 2 * 41088 + root_gathered
    # split units have no root to keep: the norm and output unit is not resharded after the forward either way
    split = _titan(parallel={"dp": 2})
    old_split = split.model_copy(update={"framework_release": FrameworkRelease(pytorch="2.7")})
    assert model(old_split).loss_bytes(layers(split)["TAIL"]) == 8 * 64 * 1024 + 2 * 65600


def test_a_torchtitan_run_reads_its_pytorch_release_only():
    raw = {
        "name": "r",
        "framework": "torchtitan",
        "models": [{"name": "m", "spec": DENSE}],
        "training": {"seq_length": 64},
        "device": {"name": "h100-80gb"},
    }
    assert parse_run_config({**raw, "framework_release": {"pytorch": "2.7"}}, "r.yaml").framework_release.pytorch
    with pytest.raises(InputError) as caught:
        parse_run_config({**raw, "framework_release": {"transformer_engine": "v2.4"}}, "r.yaml")
    said = str(caught.value)
    assert said.startswith("r.yaml: framework_release.transformer_engine: is Megatron-Core's") and "\n" not in said
    with pytest.raises(InputError) as caught:
        parse_run_config({**raw, "framework": "mindformers", "framework_release": {"pytorch": "2.7"}}, "r.yaml")
    said = str(caught.value)
    assert said.startswith("r.yaml: framework_release.pytorch: is read under frameworks megatron and torchtitan")


def test_root_units_under_pp_reduce_the_root_first():
    # perform_reduce_grad walks all_states in pre-order: the root (this stage's norm and output, 65600)
    # first, then the blocks. Stage 1 = BODY, BODY, TAIL: held 6·(65600 + 2·41088) = 886656;
    # root: 886656 − 2·65600 + 4·65600, less the blocks' sharded gradients not yet formed (2·82176):
    # 853504 (split, the blocks first: 755456). Stage 0's root is the embedding, first either way:
    # 852992 (test_frameworks)
    run = _titan(parallel={"dp": 2, "pp": 2}, training={"micro_batches": 4}, timing=ROOT)
    peaks = stage_peaks(model(run), walk(run), [[2, 1]], 80 * 2**30)
    assert [p.reduction_bytes for p in peaks] == [852992, 853504]
    # under PP nothing reshards after the forward either way: the loss as split's
    assert model(run).loss_bytes(layers(run)["TAIL"]) == 10 * 64 * 1024


def test_replicate_and_split_are_unchanged_by_the_units():
    for parallel in ({"dp": 2, "zero": 0}, {"dp": 1}):
        plain, rooted = _titan(parallel=parallel), _titan(parallel=parallel, timing=ROOT)
        assert stage_peaks(model(plain), walk(plain), [[1]], 80 * 2**30) == stage_peaks(
            model(rooted), walk(rooted), [[1]], 80 * 2**30
        )
