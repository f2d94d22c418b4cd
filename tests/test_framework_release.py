"""`framework_release`: the Megatron-Core and Transformer Engine releases a run ran, and the rules gated by them.

Each gate follows the commit that introduced the behaviour (`git tag --contains` on NVIDIA/Megatron-LM and
NVIDIA/TransformerEngine gives the first release holding it):
- TE ba5dc5dde (2025-04-08, v2.3): `_Linear`/`_LayerNormLinear.backward` hand autograd `get_dummy_wgrad(shape,
  dtype)`, one cached `torch.empty` per shape; before, `torch.empty(weight.main_grad.shape)` per backward,
  which Megatron's DDP hook drops (nothing held after the backward).
- TE d2945c6a5 (2025-10-27, v2.10): `_GroupedLinear.backward` takes the same cache; before, `torch.empty`.
- Megatron e7c55de99e (2025-08-01, core_v0.14.0): `LinearWithGradAccumulationAndAsyncCommunication.backward`
  takes TE's cache (the output layer), imported beside `transformer_engine` in one `try` (no cache without it).
- Megatron 378d81fbd3 (2026-05-30, core_v0.18.0): `AllGatherPipeline.reset(preserve_non_fsdp_units=True)`;
  before, `reset()` in `finish_grad_sync` released every gathered bucket before the optimizer step.
- Megatron adfe9e11d9 (2026-07-01, core_v0.19.0): mcore_fsdp_adapter.py's "Grandfathered Argument" removed;
  before, Megatron-FSDP's main gradients were fp32 wherever DDP's grad_reduce_in_fp32 held.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from test_memory_dummy_wgrad import GPT_SMALL, _defer_case
from test_memory_runs import DENSE, layers, make_run, model

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.config.releases import CHANGES, parse_release
from ppb_core.config.run import FrameworkRelease, parse_run_config, resolved_raw
from ppb_core.errors import InputError
from ppb_core.memory import stage_peaks
from ppb_core.memory.frameworks.dummy_wgrad import dummy_wgrad_bytes
from ppb_core.memory.model import MemoryModel, run_stage_peaks
from ppb_core.model.kinds import BodyKind
from ppb_core.model.walk import walk

# the 12-layer GPT's shapes at TP 2 (test_memory_dummy_wgrad): QKV 768 × 512, projection 512 × 256, fc1 1024 × 512,
# fc2 512 × 1024 (1,572,864 elements) and the output layer 25,216 × 512 (12,910,592), bf16
LAYER_SHAPES_BYTES = 2 * (393_216 + 131_072 + 524_288 + 524_288)
OUTPUT_LAYER_BYTES = 2 * 12_910_592


def _released(run, **release: str):
    return run.model_copy(update={"framework_release": FrameworkRelease(**release)})


@pytest.mark.parametrize(
    ("library", "value", "change", "holds"),
    [
        ("megatron_core", "core_v0.13.0", "megatron_dummy_wgrad", False),
        ("megatron_core", "core_r0.13.0", "megatron_dummy_wgrad", False),
        ("megatron_core", "core_v0.14.0", "megatron_dummy_wgrad", True),
        ("megatron_core", "0.14", "megatron_dummy_wgrad", True),
        ("megatron_core", "2025-07-31", "megatron_dummy_wgrad", False),
        ("megatron_core", "2025-08-01", "megatron_dummy_wgrad", True),
        ("megatron_core", "core_v0.18.0", "fsdp_non_unit_kept", True),
        ("megatron_core", "core_v0.17.1", "fsdp_non_unit_kept", False),
        ("megatron_core", "core_v0.18.2", "fsdp_grads_own_dtype", False),
        ("megatron_core", "core_v0.19.0", "fsdp_grads_own_dtype", True),
        ("pytorch", "2.5.0a0+e000cf0ad9", "inductor_autotune_host_copies", False),  # NGC 24.10's pre-release
        ("pytorch", "2.6.0", "inductor_autotune_host_copies", True),
        ("pytorch", "v2.1", "jit_fuser_compiles", False),
        ("pytorch", "2.2", "jit_fuser_compiles", True),
        ("transformer_engine", "v2.2", "te_dummy_wgrad", False),
        ("transformer_engine", "v2.3", "te_dummy_wgrad", True),
        ("transformer_engine", "2.6.0.post1", "te_grouped_dummy_wgrad", False),
        ("transformer_engine", "2.11.0+c188b533", "te_grouped_dummy_wgrad", True),
        ("transformer_engine", "2.15.0+42b84005", "te_grouped_wgrad_one_buffer", False),
        ("transformer_engine", "2.16.0+f8a01cd5", "te_grouped_wgrad_one_buffer", True),
        ("transformer_engine", "2026-05-11", "te_grouped_wgrad_one_buffer", False),
        ("transformer_engine", "v2.2", "te_grouped_saves_weights", False),
        ("transformer_engine", "2025-03-26", "te_grouped_saves_weights", True),
        ("transformer_engine", "2.16.0+f8a01cd5", "te_grouped_weights_unsaved", False),
        ("transformer_engine", "v2.17", "te_grouped_weights_unsaved", True),
        ("transformer_engine", "v2.11", "te_mxfp8_activations_swizzled", False),  # 99df88106: v2.12 on
        ("transformer_engine", "2.14", "te_mxfp8_activations_swizzled", True),  # the NeMo 26.04 container's
        ("transformer_engine", "2026-01-15", "te_mxfp8_activations_swizzled", False),
        ("megatron_core", "core_v0.16.0", "deepep_permute_pads", False),  # 554ce493e3: core_v0.17.0 on
        ("megatron_core", "0.17.0", "deepep_permute_pads", True),  # the NeMo 26.04 container's
        ("transformer_engine", "2025-04-07", "te_dummy_wgrad", False),
        ("megatron_core", "2025-08-20", "fsdp_dtensor_load_states", False),  # af28b5a559, 2025-08-21
        ("megatron_core", "2025-08-21", "fsdp_dtensor_load_states", True),
        ("megatron_core", "core_r0.14.0", "fsdp_dtensor_load_states", False),  # git tag --contains: core_v0.15.0 on
        ("megatron_core", "core_v0.15.0", "fsdp_dtensor_load_states", True),
        ("transformer_engine", "2025-04-08", "te_dummy_wgrad", True),
        # TE 1.14, never tagged (branch release_v1.14, "Code drop for version 1.14"): its linear.py saves no
        # `scale_inv.clone()` (#1083, v1.11) but still casts a row-parallel SP input alone (`cast_to_fp8`, and
        # `tex.fp8_transpose` in the backward): v2.0's 819a75219 is not on that branch
        ("transformer_engine", "1.14", "te_fp8_scale_inv_with_data", True),
        ("transformer_engine", "1.14.0", "te_fp8_input_transposed_in_forward", False),
        ("transformer_engine", "v1.10", "te_fp8_scale_inv_with_data", False),
        ("transformer_engine", "v2.0", "te_fp8_input_transposed_in_forward", True),
        ("transformer_engine", "1.14", "te_fp8_non_tn_gemm_sm100", False),
        ("transformer_engine", "2025-01-27", "te_fp8_non_tn_gemm_sm100", True),
        # git tag --contains: ba5dc5dde (2025-04-08) v2.3 on, 0828aa860 (2025-04-29) v2.4 on; NeMo 25.04's TE
        # (2025-03-18, bench/_nemo2.py) holds neither
        ("transformer_engine", "v2.2", "te_cp2_p2p_unbatched", False),
        ("transformer_engine", "2025-03-18", "te_cp2_p2p_unbatched", False),
        ("transformer_engine", "v2.3", "te_cp2_p2p_unbatched", True),
        ("transformer_engine", "v2.3", "te_cp2_p2p_batched_before_sm100", False),
        ("transformer_engine", "2025-04-29", "te_cp2_p2p_batched_before_sm100", True),
        ("transformer_engine", "2.7.0", "te_cp2_p2p_batched_before_sm100", True),
        # git tag --contains 0f058666a8 (2025-06-14, RouterGatingLinearFunction): core_v0.13.0rc0 on
        ("megatron_core", "core_r0.12.0", "mcore_router_te_gemm", False),
        ("megatron_core", "2025-06-13", "mcore_router_te_gemm", False),
        ("megatron_core", "core_v0.13.0", "mcore_router_te_gemm", True),
    ],
)
def test_a_release_holds_a_change_from_its_commit_or_first_release(library, value, change, holds):
    assert CHANGES[change].library == library
    assert parse_release(library, value).holds(CHANGES[change]) is holds


def test_unstated_is_the_newest_code_which_holds_every_change():
    # but torchtitan's: unstated, v0.2.2 (73a0e697, 2026-02-20; the release ppb's torchtitan defaults follow),
    # which holds its changes up to then (torchtitan_pp_return_outputs, 2025-10-22) and none of its main's after
    # it (tests/test_titan_fused_qkv.py)
    release = FrameworkRelease()
    assert not release.stated
    assert all(release.holds(name) for name, change in CHANGES.items() if change.library != "torchtitan")
    titan = {name: change.date <= "2026-02-20" for name, change in CHANGES.items() if change.library == "torchtitan"}
    assert {name: release.holds(name) for name in titan} == titan
    assert titan["torchtitan_pp_return_outputs"] and not titan["torchtitan_fused_qkv"]
    assert FrameworkRelease(torchtitan="2026-08-21").stated


def _raw(release: object, framework: str = "megatron") -> dict:
    return {
        "name": "r",
        "framework": framework,
        "framework_release": release,
        "models": [{"name": "m", "spec": DENSE}],
        "training": {"seq_length": 64},
        "device": {"name": "h100-80gb"},
    }


def test_yaml_s_unquoted_date_is_the_same_release():
    raw = yaml.safe_load("megatron_core: 2025-07-05\ntransformer_engine: '2025-06-26'")
    run = parse_run_config(_raw(raw), "run.yaml")
    assert run.framework_release.megatron_core == "2025-07-05"
    assert not run.framework_release.holds("megatron_dummy_wgrad") and run.framework_release.holds("te_dummy_wgrad")


@pytest.mark.parametrize(
    ("release", "framework", "field", "said"),
    [
        ({"megatron_core": "core_v0.99.0"}, "megatron", "framework_release.megatron_core", "no Megatron-Core release"),
        ({"transformer_engine": "v9.1"}, "megatron", "framework_release.transformer_engine", "no Transformer Engine"),
        ({"megatron_core": "2025-02-30"}, "megatron", "framework_release.megatron_core", "not a calendar date"),
        ({"megatron_core": "e7c55de99e"}, "megatron", "framework_release.megatron_core", "the date of the commit"),
        ({"megatron": "core_v0.13.0"}, "megatron", "framework_release.megatron", "unknown field"),
        ({"megatron_core": "core_v0.13.0"}, "torchtitan", "framework_release.megatron_core", "framework is torchtitan"),
        ({"pytorch": "2025-01-29"}, "megatron", "framework_release.pytorch", "its version"),
        ({"pytorch": "3.1"}, "megatron", "framework_release.pytorch", "no PyTorch release"),
        ({"pytorch": "2.5"}, "mindformers", "framework_release.pytorch", "framework is mindformers"),
    ],
)
def test_an_unknown_or_misplaced_release_is_refused_in_one_line(release, framework, field, said):
    with pytest.raises(InputError) as caught:
        parse_run_config(_raw(release, framework), "run.yaml")
    line = str(caught.value)
    assert line.startswith(f"run.yaml: {field}: ") and said in line and "\n" not in line


def test_a_release_before_te_s_cache_holds_no_dummies():
    # TE before ba5dc5dde (the CI image of cb12e3dea4 built TE bee4649c1, 2025-03-18): every linear's placeholder
    # is a `torch.empty` per backward, freed: 0 bytes on both stages, at every moment
    newest, old = _defer_case(), _released(_defer_case(), megatron_core="2025-04-04", transformer_engine="2025-03-18")
    kinds = {layer.kind for layer in walk(old)}
    assert dummy_wgrad_bytes(MemoryModel(old).setup, kinds) == 0
    for now, then in zip(run_stage_peaks(newest), run_stage_peaks(old), strict=True):
        held = LAYER_SHAPES_BYTES + (OUTPUT_LAYER_BYTES if now.stage == 1 else 0)
        assert now.moments["optimizer"] - then.moments["optimizer"] == held
        assert now.moments["backward"] - then.moments["backward"] == held


def test_te_s_linears_cache_before_megatron_s_output_layer_does():
    # 2795ebde97 (2025-07-05) with TE 8382eed6c (2025-06-26): TE's four layer shapes cached, the output layer
    # (Megatron's ColumnParallelLinear, before e7c55de99e) not: the last stage holds 3,145,728 bytes, not 28,966,912
    run = _released(_defer_case(), megatron_core="2025-07-05", transformer_engine="2025-06-26")
    last = {layer.kind for layer in walk(run) if layer.stage == 1}
    assert dummy_wgrad_bytes(MemoryModel(run).setup, last) == LAYER_SHAPES_BYTES
    # Megatron after e7c55de99e with a TE before ba5dc5dde: layers.py's `try` fails, HAVE_TE False: none
    run = _released(_defer_case(), megatron_core="core_v0.14.0", transformer_engine="v2.2")
    assert dummy_wgrad_bytes(MemoryModel(run).setup, last) == 0


def _moe_case(grouped: bool):
    # test_memory_dummy_wgrad's MoE layer: 4 experts a rank, fc1 1024 × 512 and fc2 512 × 1024 (1,048,576
    # elements), the shared expert 512 × 512 twice and the projection 512 × 512 (one shape, 262,144), QKV
    # 1536 × 512 (786,432)
    spec = {**GPT_SMALL, "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 1024}
    spec.update(shared_experts=1, shared_expert_intermediate_size=512)
    return make_run(
        spec,
        parallel={"dp": 2, "ep": 2},
        training={"seq_length": 1024, "micro_batch_size": 4, "micro_batches": 4, "moe": {"grouped_gemm": grouped}},
        framework="megatron",
    )


@pytest.mark.parametrize(("grouped", "expected"), [(True, 2 * (262_144 + 786_432)), (False, 2 * 2_097_152)])
def test_grouped_experts_take_the_cache_from_te_2_10(grouped, expected):
    # TE v2.9 (before d2945c6a5): TEGroupedMLP's GroupedLinear hands out a `torch.empty` per expert, the experts'
    # two shapes drop out (the dense linears' stay); SequentialMLP runs TE's Linear per expert, cached since v2.3
    run = _released(_moe_case(grouped), transformer_engine="v2.9")
    body = {layer.kind for layer in walk(run) if isinstance(layer.kind, BodyKind)}
    assert dummy_wgrad_bytes(MemoryModel(run).setup, body) == expected
    newest = _moe_case(grouped)
    assert dummy_wgrad_bytes(MemoryModel(newest).setup, body) == 2 * 2_097_152


def test_megatron_fsdp_s_copy_leaves_the_step_before_378d81fbd3():
    # test_memory_megatron_fsdp: DENSE at dp 2 under Megatron-FSDP holds the embedding's and the TAIL's whole
    # 2-byte copies, 131,072 + 131,200 bytes; before 378d81fbd3 `reset()` released them before the step: the
    # optimizer moment 262,272 bytes lower, the loss moment (the forward's gather) the same
    run = make_run(DENSE, parallel={"dp": 2, "fsdp": True}, framework="megatron")
    old = _released(run, megatron_core="core_v0.17.0")
    now, then = (stage_peaks(model(r), walk(r), [[1]], 80 * 2**30)[0] for r in (run, old))
    assert now.step_bytes - then.step_bytes == 262_272
    assert now.moments["loss"] == then.moments["loss"]
    found = layers(old)
    assert model(old).static_breakdown(found["HEAD"]).held_through_step_bytes == 131_072


BASE = (
    "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
    "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 32000 --tokenizer-type NullTokenizer"
)


def test_megatron_fsdp_s_gradients_are_fp32_under_bf16_before_adfe9e11d9():
    # before adfe9e11d9 mcore_fsdp_adapter.py passed main_grads_dtype=fp32 where DDP's grad_reduce_in_fp32 (set
    # by --bf16 unless --grad-reduce-in-bf16) holds: 4 bytes; from it, auto is the parameters' bf16: 2 bytes
    fsdp = f"{BASE} --use-megatron-fsdp --use-distributed-optimizer"
    old = {"megatron_core": "2026-03-22"}
    assert import_megatron(fsdp, 8, "h100-80gb").raw["training"].get("grad_bytes", 4) == 2
    assert import_megatron(fsdp, 8, "h100-80gb", release=old).raw["training"].get("grad_bytes", 4) == 4
    reduced_bf16 = import_megatron(f"{fsdp} --grad-reduce-in-bf16", 8, "h100-80gb", release=old)
    assert reduced_bf16.raw["training"].get("grad_bytes", 4) == 2
    imported = import_megatron(fsdp, 8, "h100-80gb", release=old)
    assert imported.raw["framework_release"] == old and imported.notes == []


def test_the_importer_refuses_an_unknown_release_naming_the_field():
    with pytest.raises(InputError) as caught:
        import_megatron(BASE, 8, "h100-80gb", "launch.sh", release={"transformer_engine": "v2.99"})
    assert str(caught.value).startswith("launch.sh: framework_release.transformer_engine: 'v2.99' is no")


def test_ppb_import_writes_the_release_and_refuses_a_bad_one_in_one_line(tmp_path):
    command = [sys.executable, "-m", "ppb_core.cli.main", "import", "megatron", BASE, "--gpus", "8"]
    command += ["--device", "h100-80gb", "-o", str(tmp_path / "run.yaml")]
    ok = subprocess.run([*command, "--megatron-core-release", "core_v0.13.0"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    written = yaml.safe_load((tmp_path / "run.yaml").read_text())
    assert written["framework_release"] == {"megatron_core": "core_v0.13.0"}
    bad = subprocess.run([*command[:-2], "--te-release", "2.x"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--te-release: '2.x' is no Transformer" in bad.stderr


@pytest.mark.parametrize(
    ("megatron_core", "waits"),
    [
        ("core_r0.9.0", "core_r0.8"),
        ("2024-10-31", "core_r0.8"),
        ("2024-11-01", "core_r0.10"),  # 4295be1a6c, the tunable schedule
        ("core_v0.17.0", "core_r0.10"),
        ("2026-04-16", "core_v0.18"),  # 260cba7133, the forward's send waited for before deallocating
        ("core_v0.18.0", "core_v0.18"),
    ],
)
def test_the_interleaved_send_waits_follow_the_stated_release(megatron_core, waits):
    raw = _raw({"megatron_core": megatron_core})
    run = parse_run_config(raw, "run.yaml")
    assert run.send_waits == waits
    # a resolved run config (the chain's stored copy) reads back the same
    assert parse_run_config(resolved_raw(run), "run.yaml").send_waits == waits
    # stated beside it, the release's own is accepted and another refused in one line
    said = parse_run_config({**raw, "timing": {"interleaved_send_waits": waits}}, "run.yaml")
    assert said.send_waits == waits
    other = next(value for value in ("core_r0.8", "core_r0.10", "core_v0.18") if value != waits)
    with pytest.raises(InputError) as caught:
        parse_run_config({**raw, "timing": {"interleaved_send_waits": other}}, "run.yaml")
    assert str(caught.value).startswith(f"run.yaml: timing.interleaved_send_waits: {other} contradicts")


def test_unstated_the_send_waits_are_the_field_s():
    assert parse_run_config(_raw({}), "run.yaml").send_waits == "core_v0.18"
    said = _raw({}) | {"timing": {"interleaved_send_waits": "core_r0.8"}}
    assert parse_run_config(said, "run.yaml").send_waits == "core_r0.8"


def _combine_case(activation: str, dispatcher: str = "alltoall"):
    # 8 experts of 1024 over EP 2, top-2, TP 1, s 1024 × b 4 = 4,096 tokens of h 512, bf16
    spec = {**GPT_SMALL, "num_experts": 8, "experts_per_token": 2, "moe_intermediate_size": 1024}
    spec["activation"] = activation
    return make_run(
        spec,
        parallel={"dp": 2, "ep": 2},
        training={"seq_length": 1024, "micro_batch_size": 4, "micro_batches": 4},
        framework="megatron",
        timing={"moe_dispatcher": dispatcher},
    )


def _kept(run) -> tuple[float, set[str]]:
    memory = MemoryModel(run)
    body = next(layer for layer in walk(run) if isinstance(layer.kind, BodyKind))
    state = memory.state_memory(body, *memory.option_state(body, "NONE"))
    return state.activation_bytes + state.buffers.kept_bytes(), {t.op for t in state.terms}


@pytest.mark.parametrize(("activation", "difference"), [("swiglu", 8_388_608), ("gelu", 8_388_608 - 16_777_216)])
def test_the_combine_weighs_the_experts_outputs_before_2659630721(activation, difference):
    # Before 2659630721 (2025-04-09) the all-to-all dispatcher's combine ran `unpermute(..., probs=self.probs)`,
    # whose product saves the 4,096·2 combined rows of h 512 in bf16: 8,388,608 bytes (half local, half the
    # remote part), and the experts weighted nothing: under GeLU they keep no unweighted activation (8,192
    # routed rows × 1,024 × 2 bytes = 16,777,216); SwiGLU's fused weighting kept nothing extra either way
    new, new_ops = _kept(_combine_case(activation))
    old, old_ops = _kept(_released(_combine_case(activation), megatron_core="2025-04-04"))
    assert old - new == difference
    assert "moe.combined_tokens" in old_ops and "moe.combined_tokens" not in new_ops
    assert ("moe.expert.unweighted_activation" in new_ops) is (activation == "gelu")
    assert "moe.expert.unweighted_activation" not in old_ops


def test_the_all_gather_dispatcher_s_product_saves_the_local_expert_outputs():
    # the all-gather dispatcher's `hidden_states * permuted_probs` before 2659630721: the local experts' 8,192
    # rows × 512 in bf16, 8,388,608 bytes (SwiGLU: nothing else changes)
    new, _ = _kept(_combine_case("swiglu", "allgather"))
    old, ops = _kept(_released(_combine_case("swiglu", "allgather"), megatron_core="core_v0.12.0"))
    assert old - new == 8_388_608 and "moe.combine.expert_output" in ops


def test_a_layout_before_d7bf5aaaa8_leaves_the_mtp_layers_on_the_last_stage():
    # c08d89bea0's MLA selective-recompute case: `Et*3|(tt|)*6tL` with --mtp-num-layers 1; Megatron-Core then
    # refused `m` in a layout and built every MTP layer on the last pipeline stage (multi_token_prediction.py
    # `get_mtp_num_layers_to_build`), after its decoder layers: `Et*3|(tt|)*6tmL`, as d98e8a64's file spells it
    flags = f"{BASE} --num-layers 16 --pipeline-model-parallel-size 2 --mtp-num-layers 1"
    layout = "--pipeline-model-parallel-layout Et*3|(tt|)*6tL"
    old = import_megatron(f"{flags} {layout}", 8, "h100-80gb", release={"megatron_core": "2025-08-17"})
    assert old.raw["parallel"]["layout"] == "Et*3|(tt|)*6tmL"
    spelled = import_megatron(f"{flags} {layout[:-1]}mL", 8, "h100-80gb")
    assert spelled.raw["parallel"]["layout"] == "Et*3|(tt|)*6tmL"
    newer = import_megatron(f"{flags} {layout}", 8, "h100-80gb", release={"megatron_core": "2025-08-26"})
    with pytest.raises(InputError) as caught:  # from d7bf5aaaa8 (2025-08-26) the layout names them, or is refused
        run_config_of(newer, "c")
    assert "0 MTP layers m, the model has 1" in caught.value.problem


def test_use_custom_fsdp_is_megatron_fsdp_under_its_old_name():
    # af28b5a559 (2025-08-21) renamed --use-custom-fsdp to --use-megatron-fsdp: Megatron CI's zp_z3 cases ran
    # under the old name until then (A100 values of 3806ec2754 and 2795ebde97)
    new = import_megatron(f"{BASE} --use-megatron-fsdp --use-distributed-optimizer", 8, "h100-80gb")
    old = import_megatron(f"{BASE} --use-custom-fsdp --use-distributed-optimizer", 8, "h100-80gb")
    assert old.raw == new.raw and old.notes == new.notes == []
