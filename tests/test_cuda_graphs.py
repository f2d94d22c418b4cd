"""Megatron's CUDA graphs: the run-config fields, `ppb import megatron`'s flags, and the host's launches of a
graphed layer (`ppb_core.timing.graphs`), counted by hand from Megatron-LM d98e8a64 and TE d0067d0d."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ppb_core.balance.megatron_import import import_megatron, run_config_of
from ppb_core.config.run import TimingOptions, parse_run_config
from ppb_core.errors import InputError
from ppb_core.memory.model import run_stage_peaks
from ppb_core.model.walk import walk
from ppb_core.timing.flops import Op
from ppb_core.timing.graphs import graphed_launches
from ppb_core.timing.host import launch_wait_s
from ppb_core.timing.iteration import run_iteration
from ppb_core.timing.pricer import TimeModel

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_megatron_import import SMALL_GPT  # noqa: E402
from test_timing_launches import _launches, _small  # noqa: E402


def _timing(**fields) -> TimingOptions:
    return TimingOptions.model_validate(fields)


def test_graphs_are_off_by_default_and_megatron_s_checks_are_kept() -> None:
    assert _timing().cuda_graph_impl == "none" and _timing().cuda_graph_modules == []
    with pytest.raises(ValueError, match="empty with cuda_graph_impl full_iteration"):
        _timing(cuda_graph_impl="full_iteration", cuda_graph_modules=["attn"])
    with pytest.raises(ValueError, match="moe_preprocess must be given with moe_router"):
        _timing(cuda_graph_impl="local", cuda_graph_modules=["moe_preprocess"])
    with pytest.raises(ValueError):
        _timing(cuda_graph_modules=["mamba"])


@pytest.mark.parametrize(
    ("flags", "impl", "modules"),
    [
        ("--cuda-graph-impl transformer_engine --cuda-graph-modules attn", "transformer_engine", ["attn"]),
        ('--cuda-graph-impl local --cuda-graph-modules "[attn mlp moe_router moe_preprocess]"', "local",
         ["attn", "mlp", "moe_router", "moe_preprocess"]),
        ("--enable-cuda-graph --cuda-graph-scope full", "local", []),  # deprecated spellings (validate_args)
        ("--external-cuda-graph --cuda-graph-scope attn", "transformer_engine", ["attn"]),
        ("--cuda-graph-impl full_iteration", "full_iteration", []),
    ],
)  # fmt: skip
def test_the_graph_flags_are_carried_and_no_longer_unmodelled(flags: str, impl: str, modules: list[str]) -> None:
    imported = import_megatron(SMALL_GPT.replace("--verify-integrity", f"--verify-integrity {flags}"), 8, "h100-80gb")
    run = run_config_of(imported, "case")
    assert (run.timing.cuda_graph_impl, run.timing.cuda_graph_modules) == (impl, modules)
    assert not [note for note in imported.notes if "cuda-graph" in note and "not modelled" in note]


def test_a_bad_graph_module_is_refused_naming_the_flag() -> None:
    text = SMALL_GPT.replace(
        "--verify-integrity", "--verify-integrity --cuda-graph-impl local --cuda-graph-modules attn rnn"
    )
    with pytest.raises(InputError, match="--cuda-graph-modules"):
        import_megatron(text, 8, "h100-80gb")


def test_a_graphed_dense_layer_s_launches_by_hand() -> None:
    # Megatron CI's 12-layer case (tests/test_timing_launches.py counts it eagerly: 22 forward, 44
    # backward; the attention block 4 + 5 + 4 = 13 forward, its backward norm1 4 + qkv 6 + the core 8 +
    # proj 6 + its bias-dropout-add 1 = 25; the MLP block 9 forward, 19 backward). A graph's replay:
    # the static input's (output gradient's) copy and the replay, 2 each way (TE graph.py Graphed); DDP's
    # main-gradient add stays eager after the graph for each captured weight (--no-gradient-
    # accumulation-fusion here: norms and linear weights alike).
    #   whole layer: forward 2; backward 2 + adds of norm1, norm2, qkv, proj, fc1, fc2 = 8
    #   attn only:   forward 2 + 9 = 11; backward 2 + adds of norm1, qkv, proj (3) + 19 = 24
    run = _small("h100")
    body = next(layer for layer in walk(run).layers if layer.node == "BODY")
    ops = TimeModel(run).ops(body)
    eager = _launches(run, body)
    whole = graphed_launches(ops, eager, [], wgrad_fused=False)
    assert sum(f for f, _ in whole.values()) == pytest.approx(2)
    assert sum(b for _, b in whole.values()) == pytest.approx(8)
    attn = graphed_launches(ops, eager, ["attn"], wgrad_fused=False)
    assert sum(f for f, _ in attn.values()) == pytest.approx(11)
    assert sum(b for _, b in attn.values()) == pytest.approx(24)
    # with gradient-accumulation fusion the linear weights' gradients go to main_grad inside the graph:
    # only the two norms' adds stay, 2 + 2 = 4
    fused = graphed_launches(ops, eager, [], wgrad_fused=True)
    assert sum(b for _, b in fused.values()) == pytest.approx(4)
    # a dense layer has nothing under moe_router: no graph, the eager counts
    assert graphed_launches(ops, eager, ["moe_router"], wgrad_fused=False) == eager


def test_a_graphed_query_and_key_norm_leave_two_main_gradient_adds() -> None:
    # --qk-layernorm's two TENorm modules (attention.py `get_query_key_value_tensors`, 0d8e0714cd): their
    # weights' gradients leave a graph of the attention block as two static outputs, each added into its
    # main gradient by DDP's hook after it; the replay (2 each way) sits on the block's first op.
    norm = Op("norm1", "attention", "memory")
    qk_norm = Op("qk_norm", "attention", "memory")
    eager = {"norm1": (1.0, 3.0), "qk_norm": (2.0, 6.0)}
    graphed = graphed_launches([norm, qk_norm], eager, ["attn"], wgrad_fused=True)
    assert graphed == {"norm1": (2.0, 2.0 + 1.0), "qk_norm": (0.0, 2.0)}


def test_hybridep_s_permutation_stays_outside_a_moe_preprocess_graph() -> None:
    # Megatron-LM 2edffadb52 / b1c2006cf4: MoELayer.preprocess calls the flex dispatcher's dispatch_preprocess,
    # which for HybridEP is `_HybridEPManager.setup_metadata`'s two reshapes (no kernel); the probabilities'
    # `.float()`, the metadata scan and the permute kernel come from `_HybridEPManager.dispatch`, eagerly after
    # the graph. The alltoall dispatcher's permutation is `dispatch_preprocess` itself: inside the graph.
    #   alltoall: norm2 carries the replay (2, 2) + DDP's norm add 1; router_topk, permute (0, 0)
    #   hybridep: the same, but permute keeps its eager (3, 2): scan + permute + cast, permute's + cast's gradients
    ops = [Op(name, "moe", "memory") for name in ("norm2", "router_topk", "permute", "dispatch")]
    eager = {"norm2": (1.0, 3.0), "router_topk": (4.0, 2.0), "permute": (3.0, 2.0)}
    modules = ["moe_router", "moe_preprocess"]
    alltoall = graphed_launches(ops, eager, modules, wgrad_fused=True)
    assert alltoall == {"norm2": (2.0, 3.0), "router_topk": (0.0, 0.0), "permute": (0.0, 0.0)}
    hybridep = graphed_launches(ops, eager, modules, wgrad_fused=True, dispatcher="hybridep")
    assert hybridep == {**alltoall, "permute": (3.0, 2.0)}


def test_work_a_graph_replays_counts_without_launches_in_the_wait() -> None:
    # launch_s 1 ms: the replay's 2 launches over 1 ms of work, then 5 ms launched by none, then 1 launch
    # over 1 ms. k=1: 1 - 0 = 1 ms; k=2: 2 - 0.5 = 1.5 ms; the graph's 5 ms make the host ahead after:
    # k=3: 3 - (1 + 5) < 0. The wait is 1.5 ms.
    assert launch_wait_s(0.0, [(2, 1e-3), (0, 5e-3), (1, 1e-3)], 1e-3) == pytest.approx(1.5e-3)


def test_graphs_never_slow_the_iteration_and_full_iteration_leaves_no_layer_launches() -> None:
    run = _small("h100")
    eager = run_iteration(run).seconds
    times = {}
    for impl, modules in (("local", ["attn"]), ("transformer_engine", []), ("full_iteration", [])):
        timing = run.timing.model_copy(update={"cuda_graph_impl": impl, "cuda_graph_modules": modules})
        times[impl] = run_iteration(run.model_copy(update={"timing": timing})).seconds
    assert times["local"] <= eager and times["transformer_engine"] <= times["local"]
    assert times["full_iteration"] <= times["transformer_engine"]


def _graphed_peaks(impl: str, modules: list[str]):
    run = run_config_of(import_megatron(SMALL_GPT, 8, "h100-80gb"), "case")
    timing = run.timing.model_copy(update={"cuda_graph_impl": impl, "cuda_graph_modules": modules})
    return run_stage_peaks(run.model_copy(update={"timing": timing}))


def test_the_static_buffers_te_s_graphs_hold_by_hand() -> None:
    # SMALL_GPT: 12 layers, hidden 512, seq 1024, micro-batch 4, TP 2 without SP, PP 2, DP 8/4 = 2,
    # 32 / (4·2) = 4 micro-batches; 1F1B keeps pp − rank micro-batches in flight at most: 2 on stage 0,
    # 1 on stage 1, each with 6 graphed layers. One sample (cuda_graphs.py get_layer_static_inputs):
    # hidden states 1024·4·512·2 B = 4 MiB, the causal mask (b, 1, s, s) bool 4·1024·1024 B = 4 MiB;
    # one static output gradient 4 MiB (TE graph.py static_grad_outputs_dict).
    #   attn (or the whole layer): stage 0 12·8 + 4 = 100 MiB, stage 1 6·8 + 4 = 52 MiB
    #   mlp (no attention in the graph, no mask): stage 0 12·4 + 4 = 52 MiB, stage 1 6·4 + 4 = 28 MiB
    mib = 2**20
    eager = _graphed_peaks("none", [])
    for modules, expected in (([], (100, 52)), (["attn"], (100, 52)), (["mlp"], (52, 28))):
        graphed = _graphed_peaks("transformer_engine", modules)
        for stage, want in enumerate(expected):
            for moment in ("optimizer", "backward"):
                added = graphed[stage].moments[moment] - eager[stage].moments[moment]
                assert added == pytest.approx(want * mib), (modules, stage, moment)
    # the local implementation's and full_iteration's buffers are not modelled (ppb_core.memory.graphs)
    for impl in ("local", "full_iteration"):
        assert _graphed_peaks(impl, [])[0].moments["optimizer"] == pytest.approx(eager[0].moments["optimizer"])


def test_graphs_under_another_framework_are_refused_in_one_line() -> None:
    raw = import_megatron(SMALL_GPT, 8, "h100-80gb").raw
    raw["framework"] = "torchtitan"
    # FSDP2: torchtitan v0.2.2 refuses replicate (the import's ZeRO 0) beside TP/PP before any timing word is read
    raw["parallel"]["fsdp"] = True
    raw["timing"] = {"cuda_graph_impl": "local"}  # the import's other Megatron-only words are refused alike
    with pytest.raises(InputError, match=r"timing\.cuda_graph_impl.*set framework megatron"):
        parse_run_config(raw, "case")
