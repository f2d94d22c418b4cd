"""Megatron-FSDP keeps the modules outside its FSDP units gathered; torch FSDP2 under Megatron does not.

Worked by hand on test_memory_runs' DENSE (h 64, vocabulary 1024, untied, bf16) at dp 2, fsdp true, from
Megatron-LM d98e8a64: only TransformerLayer, MoETransformerLayer and MambaLayer are FSDP units
(distributed/fsdp/mcore_fsdp_adapter.py `FullyShardedDataParallel.__init__`); a non-unit module gathers a
whole bucket beside its shard and releases it never (megatron_fsdp.py `_register_fsdp_hooks`), not even at
the iteration's `AllGatherPipeline.reset(preserve_non_fsdp_units=True)` (param_and_grad_buffer.py, commit
378d81fbd3). The HEAD is the embedding, 1024·64 = 65536 elements; the TAIL the final norm (64) and the
output layer (65536), 65600; each holds a whole 2-byte copy beside its shard: 131072 and 131200 bytes.
"""

from __future__ import annotations

import pytest
from test_memory_model import DUMMIES_TAIL
from test_memory_runs import DENSE, DENSE_BODY_PARAMS, layers, make_run, model

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.errors import InputError
from ppb_core.memory import stage_peaks
from ppb_core.memory.frameworks.megatron import MegatronRules
from ppb_core.model.walk import walk


def _run(impl: str | None, spec: dict | None = None):
    parallel = {"dp": 2, "fsdp": True} | ({"fsdp_impl": impl} if impl else {})
    return make_run(spec or DENSE, parallel=parallel, framework="megatron")


@pytest.mark.parametrize("impl", [None, "megatron_fsdp"])
def test_the_embedding_output_layer_and_final_norm_stay_gathered(impl):
    # Megatron-FSDP (the default for fsdp true under megatron): the shard (65536/2·2 = 65536 bytes) and the
    # whole copy (131072) of the embedding; the TAIL's shard 32800·2 = 65600 and its copy 131200
    fsdp, fsdp2 = model(_run(impl)), model(_run("torch_fsdp2"))
    found, plain = layers(fsdp.run), layers(fsdp2.run)
    assert fsdp2.static_breakdown(plain["HEAD"]).parameter_bytes == 65536
    assert fsdp.static_breakdown(found["HEAD"]).parameter_bytes == 65536 + 131072
    assert fsdp.static_breakdown(found["TAIL"]).parameter_bytes == 65600 + 131200
    body = next(name for name in found if name not in ("HEAD", "TAIL"))
    assert fsdp.static_breakdown(found[body]) == fsdp2.static_breakdown(plain[body])  # a unit: sharded only


def test_the_copy_is_held_at_the_optimizer_step_and_at_the_loss():
    # every moment of the one stage carries 131072 + 131200 = 262272 bytes more than under FSDP2, and TE's dummy
    # wgrads (Megatron-FSDP's parameters carry `grad_added_to_main_grad`, megatron_fsdp.py; FSDP2's do not:
    # frameworks/dummy_wgrad.py), DENSE's shapes with the output layer, test_memory_model.DUMMIES_TAIL = 212992
    peaks = [stage_peaks(model(run), walk(run), [[1]], 80 * 2**30)[0] for run in (_run(None), _run("torch_fsdp2"))]
    assert peaks[0].step_bytes - peaks[1].step_bytes == 262272 + DUMMIES_TAIL
    assert peaks[0].moments["loss"] - peaks[1].moments["loss"] == 262272 + DUMMIES_TAIL


def test_a_gathered_module_gathers_nothing_more_in_its_backward():
    # SAPP's rule gathers the other rank's shard of 2 layers in a backward: 2·(65536 − 32768)·2 = 131072 for
    # the HEAD under FSDP2; under Megatron-FSDP the embedding is whole already, and its backward fills the
    # whole gradient bucket `main_grad_getter` fetches (param_and_grad_buffer.py, d98e8a64): 65536 elements in
    # the main gradients' dtype, training.grad_bytes 4 by default, 262144 bytes
    rules = MegatronRules()
    for impl, expected in ((None, 65536 * 4), ("torch_fsdp2", 131072)):
        memory = model(_run(impl))
        head = layers(memory.run)["HEAD"]
        params = memory.parameters(head)
        assert rules.parameter_working_bytes(params, memory.setup, "HEAD", 2, None, params, kind=head.kind) == expected


def test_a_units_backward_holds_whole_buckets_of_parameters_and_gradients():
    # Megatron-FSDP all-gathers a unit into a fresh bucket of its whole size beside the rank's persistent shard
    # (`AllGatherPipeline.async_bucket_gather` → `DataParallelBuffer.fetch_bucket`), and its gradients go to a
    # whole unsharded bucket (`main_grad_getter`, febd25e3fb and d98e8a64). DENSE's body layer: 41088 elements
    # (test_memory_runs.DENSE_BODY_PARAMS), 2 gathered at 2 bytes = 164352, its gradient bucket at 4 bytes =
    # 164352: 328704. SAPP's (FSDP2's) rule: the other rank's half of 2 layers, 2·20544·2 = 82176
    rules = MegatronRules()
    for impl, expected in ((None, 2 * DENSE_BODY_PARAMS * 2 + DENSE_BODY_PARAMS * 4), ("torch_fsdp2", 82176)):
        memory = model(_run(impl))
        found = layers(memory.run)
        block = found[next(name for name in found if name not in ("HEAD", "TAIL"))]
        params = memory.parameters(block)
        assert params.total == 41088
        assert rules.parameter_working_bytes(params, memory.setup, "BODY", 2, params, params, kind=block.kind) == (
            expected
        )
    assert 2 * 41088 * 2 + 41088 * 4 == 328704


def test_an_mtp_layers_inner_transformer_layer_is_a_unit():
    # One MTP module: enorm, hnorm and its final norm 3·64, eh_proj 2·64·64 = 8192, outside the units (8384);
    # its TransformerLayer (41088, test_memory_runs.DENSE_BODY_PARAMS) is a unit. The TAIL's copy:
    # (64 + 65536 + 8384)·2 = 147968 bytes
    spec = DENSE | {"mtp_layers": 1}
    fsdp, fsdp2 = model(_run(None, spec)), model(_run("torch_fsdp2", spec))
    tail, plain = layers(fsdp.run)["TAIL"], layers(fsdp2.run)["TAIL"]
    extra = fsdp.static_breakdown(tail).parameter_bytes - fsdp2.static_breakdown(plain).parameter_bytes
    assert extra == 147968


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"framework": "torchtitan"}, "megatron_fsdp needs framework megatron"),
        ({"parallel": {"dp": 2, "zero": 3, "fsdp_impl": "megatron_fsdp"}}, "megatron_fsdp needs fsdp true"),
    ],
)
def test_fsdp_impl_outside_megatron_fsdp_is_refused_in_one_line(changes, said):
    parallel = changes.get("parallel", {"dp": 2, "fsdp": True, "fsdp_impl": "megatron_fsdp"})
    with pytest.raises(InputError) as caught:
        make_run(DENSE, parallel=parallel, framework=changes.get("framework", "megatron"))
    assert caught.value.field == "parallel.fsdp_impl" and said in caught.value.problem
    assert "\n" not in str(caught.value)


def test_an_unknown_fsdp_impl_is_refused_in_one_line():
    with pytest.raises(InputError) as caught:
        _run("deepspeed")
    assert "fsdp_impl" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("flag", "impl"), [("--use-megatron-fsdp", "megatron_fsdp"), ("--use-torch-fsdp2", "torch_fsdp2")]
)
def test_the_importer_names_the_fsdp_implementation(flag, impl):
    flags = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512"
    imported = import_megatron(f"{flags} --bf16 --use-distributed-optimizer {flag}", 8, "h100-80gb")
    run = run_config_of(imported, "case")
    assert run.parallel.fsdp and run.parallel.fsdp_impl == impl and run.megatron_fsdp == (impl == "megatron_fsdp")


def test_an_fsdp_dtensor_load_makes_the_optimizer_states_before_iteration_1():
    # Megatron-LM febd25e3fb (and d98e8a64): training.py calls `load_checkpoint` wherever --load is set; under
    # --ckpt-format fsdp_dtensor it builds the state dict to load into whether a checkpoint exists or not,
    # handing `generate_state_dict` the optimizer unless --finetune or --no-load-optim (and that asks for its
    # state unless --no-save-optim); `sharded_param_state_fsdp_dtensor(is_loading=True)` then runs
    # `_init_optimizer_states_with_dummy_values`, one `optimizer.step()` on zero gradients: Adam's moments exist
    # before iteration 1. The format and its dummy step came with af28b5a559 (2025-08-21, core_v0.15.0).
    flags = "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 512 --max-position-embeddings 512"
    fsdp = f"{flags} --bf16 --use-distributed-optimizer --use-megatron-fsdp --ckpt-format fsdp_dtensor"

    def at_start(text: str, release: dict | None = None) -> bool:
        imported = import_megatron(text, 8, "h100-80gb", release=release)
        assert imported.notes == []  # the checkpoint flags read past; --no-save-optim read where it bears
        return run_config_of(imported, "case").training.optimizer_states_at_start

    assert at_start(f"{fsdp} --load /ckpt")
    assert at_start(f"{fsdp} --load=/ckpt --auto-detect-ckpt-format")  # detection first; the fsdp_dtensor branch after
    assert not at_start(fsdp)  # no --load: load_checkpoint never runs
    for flag in ("--finetune", "--no-load-optim", "--no-save-optim"):
        assert not at_start(f"{fsdp} --load /ckpt {flag}")
    assert not at_start(
        f"{flags} --bf16 --use-distributed-optimizer --load /ckpt"
    )  # torch_dist: no checkpoint, no state
    assert at_start(f"{fsdp} --load /ckpt", {"megatron_core": "2025-08-21"})
    assert not at_start(f"{fsdp} --load /ckpt", {"megatron_core": "2025-08-20"})
    assert not at_start(f"{fsdp} --load /ckpt", {"megatron_core": "core_v0.14.0"})
