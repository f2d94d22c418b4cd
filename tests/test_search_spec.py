"""The search spec: what it accepts, and bad input as one line naming the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.search.enumerate import Refusal, Strategy, enumerate_strategies, validate
from ppb_core.search.spec import load_search_spec, parse_search_spec

DATA = Path(__file__).parent / "data" / "search"
ROOT = Path(__file__).parent.parent


def tiny() -> dict:
    return yaml.safe_load((DATA / "tiny-dense.yaml").read_text())


def test_the_tiny_spec_loads_with_its_batch_and_defaults() -> None:
    spec = parse_search_spec(tiny(), DATA / "tiny-dense.yaml", DATA)
    assert spec.name == "tiny-dense"
    assert spec.global_batch == 24
    assert spec.seq_length == 4096
    assert spec.specs["llm"].num_layers == 6
    # megatron's default recompute setting: its selective recompute (core_attn)
    assert spec.recompute_settings == [{"granularity": "selective"}]
    assert spec.fixed_training == {"seq_length": 4096, "dtype": "bf16", "optimizer": "adam"}


def test_global_batch_in_tokens_is_sequences_of_seq_length() -> None:
    raw = tiny()
    raw["training"] = {"seq_length": 4096, "global_batch_tokens": 4096 * 24}
    assert parse_search_spec(raw, "s.yaml", DATA).global_batch == 24


def test_every_shipped_search_loads() -> None:
    for path in sorted((ROOT / "searches").glob("*.yaml")):
        spec = load_search_spec(path)
        assert spec.devices >= 1 and spec.specs


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda raw: raw.update(extra=1), "extra", "unknown field"),
        (lambda raw: raw["training"].update(micro_batches=4), "training.micro_batches", "chosen by the search"),
        (lambda raw: raw["training"].update(recompute="full"), "training.recompute", "chosen by the search"),
        (lambda raw: raw["training"].update(global_batch_tokens=8), "training", "exactly one of"),
        (lambda raw: raw["training"].pop("global_batch"), "training", "exactly one of"),
        (lambda raw: raw["training"].update(global_batch=0), "training.global_batch", "positive integer"),
        (lambda raw: raw["training"].update(dtype="fp8"), "training.dtype", "bf16"),
        (lambda raw: raw["training"].update(seq_lenght=8), "training.seq_lenght", "unknown field"),
        # an optional key misspelt is said too, and a short one a letter off the only field it could be (session 27)
        (lambda raw: raw.update(search={"topp": 5}), "search.topp", "unknown field: did you mean top?"),
        (lambda raw: raw.update(limit=raw.pop("limits")), "limit", "unknown field: did you mean limits?"),
        (
            lambda raw: raw["training"].update(micro_batch_sise=[1]),
            "training.micro_batch_sise",
            "unknown field: did you mean micro_batch_size?",
        ),
        (lambda raw: raw.update(devices=0), "devices", "greater than 0"),
        (lambda raw: raw.update(devics=raw.pop("devices")), "devics", "unknown field: did you mean devices?"),
        # torchtitan shards with FSDP2 or replicates (run.py refuses its ZeRO-1/2): no strategy could come of it
        (
            lambda raw: raw.update(framework="torchtitan") or raw["limits"].update(zero=[0, 1]),
            "limits.zero",
            "torchtitan has no ZeRO-1",
        ),
        # fsdp [true] alone makes every point ZeRO-3: a zero 1 beside it is a contradiction, not a grid
        (lambda raw: raw["limits"].update(zero=[1], fsdp=[True]), "limits.zero", "zero [1] contradicts limits.fsdp"),
        (lambda raw: raw["limits"].update(tp=[]), "limits.tp", "at least 1"),
        (lambda raw: raw["limits"].update(schedules=["zigzag"]), "limits.schedules.0", "1f1b"),
        (lambda raw: raw["limits"].update(recompute=[{"mode": "full"}]), "limits.recompute.0", "torchtitan's words"),
        (lambda raw: raw.update(framework="jax"), "framework", "megatron"),
        # another framework's timing setting holds for every strategy: refused once, before the grid
        (lambda raw: raw.update(timing={"cp_rotate_method": "alltoall"}), "timing.cp_rotate_method", "torchtitan's"),
        # Megatron-Core asserts the combined 1F1B for it (transformer_config.py), which this dense model's grid
        # does not offer: every point would be refused, so the spec is, once
        (
            lambda raw: raw.update(timing={"delay_wgrad_compute": True}),
            "timing.delay_wgrad_compute",
            "which this grid does not offer (limits.ep_overlap)",
        ),
        # the combined 1F1B is Megatron-Core's, for an MoE model (transformer_config.py asserts ep > 1)
        (
            lambda raw: raw["limits"].update(ep_overlap=[False, True]),
            "limits.ep_overlap",
            "for an MoE model (no model has experts)",
        ),
        (
            lambda raw: (
                raw.update(framework="torchtitan", timing={"cuda_graph_warmup_steps": 1})
                or raw["limits"].pop("zero", None)
            ),
            "timing.cuda_graph_warmup_steps",
            "this search's framework is torchtitan",
        ),
        # torchtitan's [compile] under Megatron; TE's settings without the TE part they set
        (lambda raw: raw.update(timing={"compile_loss": True}), "timing.compile_loss", "torchtitan's [compile]"),
        (
            lambda raw: (
                raw.update(timing={"te_attention_backend": "flash"}) or raw["training"].update(flash_attention=False)
            ),
            "timing.te_attention_backend",
            "training.flash_attention is false",
        ),
        (lambda raw: raw.update(timing={"ub_sm_margin": False}), "timing.ub_sm_margin", "timing.overlap.tp > 0"),
        # --attention-backend fused under determinism on A100: TE has no attention left (every strategy's)
        (
            lambda raw: (
                raw.update(timing={"te_attention_backend": "fused", "deterministic": True})
                or raw["device"].update(name="a100-80gb")
            ),
            "timing.te_attention_backend",
            "fused under deterministic attention on sm80",
        ),
        # the tiny spec's nodes of 4 are no mesh of 7 links (a node of 8)
        (lambda raw: raw["device"].update(intra_node_links=7), "device.intra_node_links", "devices_per_node is 4"),
        (lambda raw: raw["device"].update(reserved_mb=9000), "device.memory_mb", "no memory left"),
        (lambda raw: raw["search"].update(top=0), "search.top", "greater than 0"),
        # sizes no real search has (ppb_core/limits.py)
        (lambda raw: raw.update(devices=2**21), "devices", "over ppb's limit of 1,048,576 devices"),
        (lambda raw: raw["limits"].update(tp=[2**30]), "limits.tp.0", "over ppb's limit"),
        (lambda raw: raw["limits"].update(pp=list(range(1, 66))), "limits.pp", "at most 64"),
        (lambda raw: raw["search"].update(top=1001), "search.top", "over ppb's limit of 1,000 strategies"),
        (lambda raw: raw["search"].update(time_budget_s=1e9), "search.time_budget_s", "over ppb's limit"),
        (lambda raw: raw["training"].update(global_batch=2**60), "training.global_batch", "over ppb's limit"),
        (lambda raw: raw["training"].update(global_batch="many"), "training.global_batch", "positive integer"),
        # nodes are whole: the tiny spec's 8 devices are two nodes of 4; 6 are one and a half
        (lambda raw: raw.update(devices=6), "devices", "6 devices are not whole nodes of 4"),
        (lambda raw: raw.update(devices_per_node=16), "devices", "set partial_nodes: true"),
        (lambda raw: raw.update(partial_nodes="some"), "partial_nodes", "boolean"),
        # TP inside a node of 4: tp 8 spans two nodes; tp 3 would put ranks 3-5 across nodes 0 and 1
        (lambda raw: raw["limits"].update(tp=[1, 8]), "limits.tp", "tp 8 spans more than a node of 4 devices"),
        (lambda raw: raw.update(devices=12) or raw["limits"].update(tp=[3]), "limits.tp", "its groups cross nodes"),
        (lambda raw: raw["limits"].update(etp=[8]), "limits.etp", "etp 8 spans more than a node of 4"),
        # a size that does not divide the 8 devices leaves no whole data-parallel degree
        (lambda raw: raw["limits"].update(pp=[1, 3]), "limits.pp", "pp 3 does not divide the 8 devices"),
        (lambda raw: raw["limits"].update(cp=[16]), "limits.cp", "cp 16 does not divide the 8 devices"),
        (lambda raw: raw["limits"].update(ep=[5]), "limits.ep", "ep 5 does not divide the 8 devices"),
        # a dense model's grid has no expert dimension: listed, it was silently dropped (December 2026)
        (lambda raw: raw["limits"].update(ep=[1, 2]), "limits.ep", "is expert parallel, for an MoE model"),
        (lambda raw: raw["limits"].update(etp=[2]), "limits.etp", "is expert tensor parallel, for an MoE model"),
        # torchtitan's CP is torch's ring attention (v0.2.2 has no Ulysses): refused once, not point by point
        (
            lambda raw: raw.update(framework="torchtitan") or raw["limits"].update(cp_variant=["ring", "ulysses"]),
            "limits.cp_variant",
            "torchtitan's context parallelism is ring attention",
        ),
        (
            lambda raw: raw.update(framework="mindformers") or raw["limits"].update(cp_variant=["ring", "all_gather"]),
            "limits.cp_variant",
            "all_gather is TransformerEngine's, under framework megatron",
        ),
    ],
)
def test_bad_specs_are_one_line_naming_the_field(change, field: str, words: str) -> None:
    raw = tiny()
    change(raw)
    with pytest.raises(InputError) as caught:
        parse_search_spec(raw, "bad.yaml", DATA)
    assert caught.value.source == "bad.yaml"
    assert caught.value.field == field
    assert words in caught.value.problem
    assert "\n" not in caught.value.line()


def test_global_batch_tokens_must_be_whole_sequences() -> None:
    raw = tiny()
    raw["training"] = {"seq_length": 4096, "global_batch_tokens": 4096 * 24 + 1}
    with pytest.raises(InputError, match=r"training\.global_batch_tokens: .* not a whole number"):
        parse_search_spec(raw, "bad.yaml", DATA)


def test_a_missing_model_file_names_it(tmp_path: Path) -> None:
    raw = tiny()
    raw["models"] = [{"name": "llm", "config": "nowhere.json"}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(InputError, match=r"nowhere\.json") as caught:
        load_search_spec(path)
    assert caught.value.source == str(path) and caught.value.field == "models.0.config"


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("devices: [1,\n")
    with pytest.raises(InputError, match="not valid YAML at line"):
        load_search_spec(path)


def test_partial_nodes_and_tp_across_nodes_when_the_spec_says_so() -> None:
    raw = tiny()
    raw.update(devices=6, partial_nodes=True)  # a node of 4 and half of another
    raw["limits"].update(tp=[1, 2], pp=[1, 2, 3])
    assert parse_search_spec(raw, "s.yaml", DATA).devices == 6
    raw = tiny()
    raw["limits"].update(tp=[8], tp_within_node=False)  # tp 8 over two nodes of 4, as asked
    spec = parse_search_spec(raw, "s.yaml", DATA)
    assert {point.tp for point in enumerate_strategies(spec)} == {8}


def test_default_tp_divides_a_node_when_tp_stays_inside() -> None:
    # nodes of 6: powers of two up to 6 are 1, 2, 4; 4 does not divide 6 (ranks 4-7 cross nodes 0 and 1)
    raw = tiny()
    raw.update(devices=12, devices_per_node=6)
    raw["limits"].pop("tp")
    raw["limits"].update(pp=[1], micro_batch_size=[1])
    within = parse_search_spec(raw, "s.yaml", DATA)
    assert {point.tp for point in enumerate_strategies(within)} == {1, 2}
    raw["limits"]["tp_within_node"] = False
    across = parse_search_spec(raw, "s.yaml", DATA)
    assert {point.tp for point in enumerate_strategies(across)} == {1, 2, 4}


def test_a_grid_over_the_limit_is_refused_before_any_work() -> None:
    # 64 values of tp, cp, pp and micro-batch size: 64^4 = 16,777,216 > 10^7 points already. Each size
    # must divide the devices: 720,720 = 2^4·3^2·5·7·11·13 has 240 divisors, of which the first 64.
    raw = tiny()
    devices = 720720
    every = [d for d in range(1, devices + 1) if devices % d == 0][:64]
    raw.update(devices=devices)
    raw["limits"].update(tp=every, cp=every, pp=every, micro_batch_size=every, tp_within_node=False)
    spec = parse_search_spec(raw, "big.yaml", DATA)
    with pytest.raises(InputError) as caught:
        next(enumerate_strategies(spec))
    assert caught.value.field == "limits" and "points in the search's grid" in caught.value.problem


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        # pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, written from its tables by hand:
        # Table 1, 8B on 8 GPUs: FSDP 8, local batch 2 (global 16) -> one micro-batch of 2
        ("torchtitan-llama3.1-8b-8", dict(tp=1, cp=1, pp=1, dp=8, micro_batch_size=2, micro_batches=1)),
        # Table 3, 8B on 128 GPUs: FSDP 128, local batch 2 (global 256)
        ("torchtitan-llama3.1-8b-128", dict(tp=1, cp=1, pp=1, dp=128, micro_batch_size=2, micro_batches=1)),
        # Table 4, 70B on 256 GPUs: FSDP 32 × TP 8, local batch 16 (global 512 = 32 · 16)
        ("torchtitan-llama3.1-70b-256", dict(tp=8, cp=1, pp=1, dp=32, micro_batch_size=16, micro_batches=1)),
    ],
)
def test_torchtitans_published_settings_are_in_their_searches_grid(name: str, fields: dict) -> None:
    spec = load_search_spec(ROOT / "searches" / f"{name}.yaml")
    wanted = {**fields, "fsdp": True, "schedule": "1f1b", "vpp": 1, "sequence_parallel": fields["tp"] > 1}
    found = [
        point
        for point in enumerate_strategies(spec)
        if isinstance(point, Strategy) and all(getattr(point, key) == value for key, value in wanted.items())
    ]
    assert len(found) == 1  # one recompute setting (the framework's selective), one cp variant
    assert not isinstance(validate(spec, found[0]), Refusal)


def test_a_run_config_given_as_a_search_spec_and_back_is_named_so() -> None:
    """`ppb search configs/x.yaml` said "training.micro_batch_size: chosen by the search", and
    `ppb estimate searches/x.yaml` "training.global_batch_tokens: unknown field": true, not the mistake."""
    run = yaml.safe_load((ROOT / "configs" / "llama3-8b.yaml").read_text())
    with pytest.raises(InputError) as caught:
        parse_search_spec(run, "run.yaml", ROOT / "configs")
    assert caught.value.field == "parallel" and "this is a run config, not a search spec" in caught.value.problem
    with pytest.raises(InputError) as caught:
        parse_run_config(tiny(), "spec.yaml", DATA)
    assert caught.value.field == "devices" and "this is a search spec, not a run config" in caught.value.problem


def test_a_search_s_release_reaches_every_strategy() -> None:
    # framework_release (ppb_core.config.releases) holds for the whole search: each strategy's run config
    # carries it, so its memory and time follow that release's rules; under another framework it is refused
    raw = tiny() | {"framework_release": {"megatron_core": "core_v0.13.0", "transformer_engine": "v2.4"}}
    spec = parse_search_spec(raw, DATA / "tiny-dense.yaml", DATA)
    strategies = [s for s in enumerate_strategies(spec) if not isinstance(s, Refusal)]
    assert strategies
    for strategy in strategies[:3]:
        run = parse_run_config(strategy.run_raw(spec), "s.yaml")
        assert run.framework_release.megatron_core == "core_v0.13.0"
        assert not run.framework_release.holds("megatron_dummy_wgrad") and run.send_waits == "core_r0.10"
    titan = tiny() | {"framework": "torchtitan", "framework_release": {"transformer_engine": "v2.4"}}
    with pytest.raises(InputError) as caught:
        parse_search_spec(titan, "s.yaml", DATA)
    assert str(caught.value).startswith("s.yaml: framework_release.transformer_engine: is Megatron-Core's")


def test_a_search_s_cublas_workspace_reaches_every_strategy() -> None:
    """A spec's `memory` section was refused as an unknown field, so a job run with CUBLAS_WORKSPACE_CONFIG
    (the Megatron CI GPT 7B rows' ':4096:8') could not be searched as it ran. Each strategy now carries it:
    4096 KiB × 8 = 32 MiB a cuBLAS handle (PyTorch CublasHandlePool.cpp `parseChosenWorkspaceSize`)."""
    raw = tiny() | {"memory": {"cublas_workspace_config": ":4096:8"}}
    spec = parse_search_spec(raw, DATA / "tiny-dense.yaml", DATA)
    strategy = next(s for s in enumerate_strategies(spec) if not isinstance(s, Refusal))
    run = parse_run_config(strategy.run_raw(spec), "s.yaml")
    assert run.memory.cublas_workspace_bytes == 4096 * 8 * 1024
    # one run's measured stage peaks calibrate that run, not a grid of layouts: refused in one line
    raw["memory"]["calibration"] = "peaks.csv"
    with pytest.raises(InputError) as caught:
        parse_search_spec(raw, "s.yaml", DATA)
    assert str(caught.value).startswith("s.yaml: memory.calibration: is one run's measured stage peaks")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda raw: raw.update(timing={"moe_dispatcher": "allgather"}), "not allgather (timing.moe_dispatcher)"),
        (lambda raw: raw["training"].update(dtype="fp32"), "with a bf16 or fp16 model (training.dtype is fp32)"),
        (lambda raw: raw.update(framework="torchtitan"), "under framework megatron"),
    ],
)
def test_the_combined_1f1b_listed_where_megatron_core_never_runs_it_is_refused_once(change, words) -> None:
    # transformer_config.py __post_init__ (d98e8a64) asserts the alltoall or flex dispatcher and a bf16 or fp16
    # model for --overlap-moe-expert-parallel-comm whatever the layout: a spec listing it true under such settings
    # is refused once, not every combined point counted refused
    raw = yaml.safe_load((DATA / "tiny-moe.yaml").read_text())
    raw["limits"]["ep_overlap"] = [False, True]
    if "framework" in str(words):
        raw["limits"] = {key: value for key, value in raw["limits"].items() if key not in ("zero",)}
    change(raw)
    with pytest.raises(InputError) as caught:
        parse_search_spec(raw, "moe.yaml", DATA)
    assert caught.value.field == "limits.ep_overlap" and words in caught.value.problem
    assert caught.value.problem.startswith("is Megatron-Core's --overlap-moe-expert-parallel-comm, ")
