"""`device.reserved_mb: auto`: what the runtime holds outside the allocator, per framework and layout
(`ppb_core.config.runtime_reserve`), each expected figure by hand from the sources the module cites:

* CUDA context 300 MB (pytorch/pytorch#107667, lazy module loading);
* an NCCL communicator 688 MB, 544 at two ranks (NVIDIA/nccl#964, 4 A100, a 4 MB all-reduce);
* NVLS per bulk communicator with ranks in the node: channels (16 sm90; 24 sm100 one node, 32 across) · 2 ·
  128 KiB · 8 steps = channels · 2 MiB, per local rank (nccl src/transport/nvls.cc, v2.30.7);
* send/receive per peer in the node (4.34 − 1.06) GB / 7 (NVIDIA/nccl#1685, 8 H100 all-to-all);
* HCCL 2 · 200 MB per communication domain (CANN, HCCL_BUFFSIZE).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ppb_core.cli.main import main
from ppb_core.config.devices import DEVICE_CATALOG
from ppb_core.config.run import Parallel, parse_run_config
from ppb_core.config.runtime_reserve import local_ranks, runtime_reserve
from ppb_core.errors import InputError
from ppb_core.estimate.held_back import held_back_line, thin_headroom
from ppb_core.estimate.run import device_summary
from ppb_core.units import MB
from tests.small_models import SMALL_GPT_SPEC

H100, A100, B200, ASCEND = (DEVICE_CATALOG[name] for name in ("h100-80gb", "a100-80gb", "b200", "ascend-910b"))
PEER = (4.34 - 1.06) * 1e9 / 7  # bytes per send/receive peer in the node (NVIDIA/nccl#1685)


def _parts(reserve) -> dict[str, float]:
    return {part.name: part.bytes / MB for part in reserve.parts}


def test_local_ranks_follow_the_rank_order() -> None:
    # 8 a node: tp 2 (stride 1) 2 in it; dp 8 after tp 2 (stride 2) 4 in it; pp after 16 ranks: 1
    assert (local_ranks(2, 1, 8), local_ranks(8, 2, 8), local_ranks(4, 16, 8)) == (2, 4, 1)
    assert local_ranks(1, 1, 8) == 1


def test_megatron_dense_layout_on_h100() -> None:
    # configs/llama3-8b.yaml's layout: dp 8, tp 2, pp 4 (64 ranks, 8 nodes), untied embeddings, the distributed
    # optimizer (zero 1). communicators: world 64, tp 2 (a pair: 544), dp·cp 8, pp 4, the optimizer instance's
    # 64 (its gradient norm, megatron/core/optimizer/__init__.py) -> 544 + 4·688 = 3,296 MB
    # NVLS (H100 behind NVSwitch, 16 channels): tp 2 in the node 16·2·2 = 64, dp·cp 4 in it 16·2·4 = 128 -> 192 MB
    # pp: stride tp·cp·dp = 16 >= 8, no neighbour in the node -> no send/receive part
    par = Parallel(dp=8, tp=2, pp=4)
    reserve = runtime_reserve("megatron", par, H100)
    assert _parts(reserve) == {"CUDA context": 300, "NCCL 5 communicators": 3296, "NVLS": 192}
    assert [g.name for g in reserve.groups] == ["world", "tp", "dp·cp", "pp", "optimizer instance"]
    # without the distributed optimizer (zero 0) Float16Optimizer reduces the norm over tp·pp 8 instead: the same
    # count; with two instances, each instance's 32 ranks and the pair across them (544): + 544
    assert [g.name for g in runtime_reserve("megatron", Parallel(dp=8, tp=2, pp=4, zero=0), H100).groups][-1] == "tp·pp"
    two = runtime_reserve("megatron", Parallel(dp=8, tp=2, pp=4, distributed_optimizer_instances=2), H100)
    assert two.total_mb == 3788 + 544
    assert reserve.total_mb == 300 + 3296 + 192  # 3,788


def test_megatron_tied_embeddings_add_the_embedding_group() -> None:
    # the same layout with tied weights: + the first and last stages' pair (544 MB) -> 3,788 + 544
    reserve = runtime_reserve("megatron", Parallel(dp=8, tp=2, pp=4), H100, tied=True)
    assert reserve.total_mb == 3788 + 544


def test_megatron_moe_alltoall_counts_the_peers_in_the_node() -> None:
    # dp 16, pp 4, ep 8, tp 1 (64 ranks): world 64, dp·cp 16, pp 4, optimizer instance 64, ep 8, expert dp 16/8
    # = 2 (a pair)
    # -> 5·688 + 544 = 3,984 MB; NVLS dp·cp 8 in the node: 16·2·8 = 256 MB; ep 8 in the node: 7 peers
    par = Parallel(dp=16, pp=4, ep=8)
    parts = _parts(runtime_reserve("megatron", par, H100, a2a=True))
    assert parts["NCCL 6 communicators"] == 3984
    assert parts["NVLS"] == 256
    assert parts["NCCL send/receive"] == pytest.approx(7 * PEER / MB)  # 3,128.05 MB
    # DeepEP's dispatchers keep their own buffers (priced in the peak): no all-to-all peers
    assert "NCCL send/receive" not in _parts(runtime_reserve("megatron", par, H100, a2a=False))


def test_pipeline_and_ring_neighbours_in_the_node() -> None:
    # tp 2, pp 4 on 8 ranks: pp stride 2, 4 stages in the node -> 2 neighbours; cp 1
    parts = _parts(runtime_reserve("megatron", Parallel(tp=2, pp=4), H100))
    assert parts["NCCL send/receive"] == pytest.approx(2 * PEER / MB)
    # pp 2 on 2 ranks: one neighbour
    assert _parts(runtime_reserve("megatron", Parallel(pp=2), H100))["NCCL send/receive"] == pytest.approx(PEER / MB)


def test_a100_has_no_nvls() -> None:
    # A100 (sm80): the communicators and the context only: 300 + 544 + 4·688 = 3,596 MB
    assert runtime_reserve("megatron", Parallel(dp=8, tp=2, pp=4), A100).total_mb == 3596


def test_blackwell_nvls_channels() -> None:
    # b200, 8 ranks of FSDP in one node: torchtitan's world 8 (the seed's broadcast), FSDP 8, loss 8 -> 3·688 =
    # 2,064 MB;
    # NVLS on the FSDP mesh: 24 channels in one node · 2 · 8 = 384 MB; 16 ranks (two nodes): 32 · 2 · 8 = 512
    one = _parts(runtime_reserve("torchtitan", Parallel(dp=8, fsdp=True), B200))
    assert one == {"CUDA context": 300, "NCCL 3 communicators": 2064, "NVLS": 384}
    assert _parts(runtime_reserve("torchtitan", Parallel(dp=16, fsdp=True), B200))["NVLS"] == 512


def test_mindformers_on_ascend_holds_hccl_buffers() -> None:
    # dp 2, tp 4, pp 2 (16 ranks): world, tp, dp, pp -> 4 domains · 2 · 200 MB = 1,600 MB; no CUDA context
    reserve = runtime_reserve("mindformers", Parallel(dp=2, tp=4, pp=2), ASCEND)
    assert _parts(reserve) == {"HCCL 4 communicators": 1600}
    assert reserve.total_mb == 1600
    # one device: nothing held
    assert runtime_reserve("mindformers", Parallel(), ASCEND).total_mb == 0
    # Megatron's groups on Ascend (MindSpeed's HCCL): dp 8 -> world, dp·cp, the optimizer instance: 3 · 400 MB
    assert _parts(runtime_reserve("megatron", Parallel(dp=8), ASCEND)) == {"HCCL 3 communicators": 1200}


def _raw(reserved) -> dict:
    device = {"name": "h100-80gb"} if reserved is None else {"name": "h100-80gb", "reserved_mb": reserved}
    return {
        "name": "r",
        "models": [{"name": "llm", "spec": dict(SMALL_GPT_SPEC)}],
        "parallel": {"dp": 8, "tp": 2, "pp": 4},
        "training": {"seq_length": 2048, "micro_batches": 8},
        "device": device,
    }


def test_auto_resolves_with_the_layout_and_a_number_wins() -> None:
    auto = parse_run_config(_raw("auto"))
    assert auto.device.reserved == 3788  # test_megatron_dense_layout_on_h100 (SMALL_GPT_SPEC is untied)
    assert auto.device.usable_mb == 81559 - 3788
    assert device_summary(auto)["reserved_from"] == "auto"
    stated = parse_run_config(_raw(4000))
    assert stated.device.reserved == 4000 and stated.reserve is None
    assert device_summary(stated)["reserved_from"] == "stated"
    assert device_summary(stated)["runtime_reserve"]["total_mb"] == 3788  # said beside it, not held
    unset = parse_run_config(_raw(None))
    assert unset.device.reserved == 0 and device_summary(unset)["reserved_from"] == "unset"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("lots", "'lots' is neither a whole number of MB nor auto"),
        ("AUTO", "'AUTO' is neither a whole number of MB nor auto"),
        (4.5, "4.5 is neither a whole number of MB nor auto"),
        (True, "true is neither a whole number of MB nor auto"),
        (-5, "greater than or equal to 0"),
    ],
)
def test_bad_reserved_mb_is_one_line(value, problem) -> None:
    with pytest.raises(InputError) as err:
        parse_run_config(_raw(value), "run.yaml")
    assert err.value.field == "device.reserved_mb"
    assert problem in err.value.problem and "\n" not in str(err.value)


def test_held_back_line_and_thin_headroom() -> None:
    device = device_summary(parse_run_config(_raw(None)))
    line = held_back_line(device)
    assert line.startswith("held back 0 MB (device.reserved_mb unset); the runtime takes about 3,788 MB")
    assert "CUDA context 300 MB" in line and "NCCL 5 communicators 3,296 MB" in line
    # 3,788 short of the runtime: a stage with 1,000 MB free is warned, one with 5,000 is not, nor one over
    warnings = thin_headroom(device, [(0, 1000.0), (1, 5000.0), (2, -10.0)])
    assert len(warnings) == 1 and warnings[0].startswith("stage 0 leaves 1,000 MB free, less than the 3,788 MB")
    auto = device_summary(parse_run_config(_raw("auto")))
    assert held_back_line(auto).startswith("held back 3,788 MB for the runtime (device.reserved_mb auto): ")
    assert thin_headroom(auto, [(0, 10.0)]) == []


def test_estimate_prints_what_it_holds_back(tmp_path, capsys) -> None:
    import yaml

    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump(_raw("auto")))
    assert main(["estimate", str(run), "--no-times"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "held back 3,788 MB for the runtime (device.reserved_mb auto): CUDA context 300 MB" in out
    assert "less reserved_mb 3,788.0" in out


def test_a_torchtitan_import_holds_the_runtime_back() -> None:

    from ppb_core.balance.torchtitan_import import import_torchtitan, torchtitan_run_config

    job = (Path(__file__).parent / "data" / "torchtitan" / "llama3_8b.toml").read_text()
    imported = import_torchtitan(job, 8, "h100-80gb")
    assert imported.raw["device"] == {"name": "h100-80gb", "reserved_mb": "auto"}
    run = torchtitan_run_config(imported, "llama3_8b.toml")
    # FSDP over the 8 GPUs of one node: world, FSDP and loss meshes 3·688 = 2,064 MB, NVLS on the FSDP mesh
    # 16·2 MiB·8 = 256, the context 300 -> 2,620 MB (test_blackwell_nvls_channels has the b200 twin)
    assert (run.parallel.dp, run.parallel.tp, run.parallel.pp) == (8, 1, 1)
    assert run.device.reserved == 2620


def test_check_warns_where_a_plan_leaves_less_than_the_runtime_takes(tmp_path, capsys) -> None:
    import json

    configs = Path(__file__).parent.parent / "configs"
    text = (configs / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {configs / 'hf' / 'llama3-8b.json'}")
    plan = tmp_path / "plan.yaml"
    plan.write_text("offset: [0, 0, 0, 0]\nrecompute: False\nselect_recompute: False\nselect_comm_recompute: False\n")
    run = tmp_path / "run.yaml"
    run.write_text(text.replace("reserved_mb: 4000", "reserved_mb: 0"))
    main(["check", str(run), "--plan", str(plan), "--json", "--no-optimum"])
    stages = json.loads(capsys.readouterr().out)["stages"]
    top = max(stages, key=lambda s: s["peak_mb"])
    # the same run on a device 1,000 MB above that stage's peak, nothing held back: it fits, with 1,000 MB free,
    # short of the 3,788 MB the runtime takes on this layout (test_megatron_dense_layout_on_h100)
    memory = round(top["peak_mb"] + 1000)
    run.write_text(text.replace("reserved_mb: 4000", f"reserved_mb: 0, memory_mb: {memory}"))
    assert main(["check", str(run), "--plan", str(plan), "--json", "--no-optimum"]) == 0
    out = json.loads(capsys.readouterr().out)
    said = f"stage {top['stage']} leaves {memory - top['peak_mb']:,.0f} MB free, less than the 3,788 MB"
    assert any(w.startswith(said) for w in out["headroom_warnings"])
    assert out["held_back"].startswith("held back 0 MB (device.reserved_mb); the runtime takes about 3,788 MB")
    # held back as auto, the fit counts it: the same device leaves that stage 1,000 − 3,788 MB, it does not fit
    run.write_text(text.replace("reserved_mb: 4000", f"reserved_mb: auto, memory_mb: {memory}"))
    assert main(["check", str(run), "--plan", str(plan), "--json", "--no-optimum"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["headroom_warnings"] == [] and out["held_back"].startswith("held back 3,788 MB for the runtime")


def test_torchtitan_moe_meshes() -> None:
    # dp 16, ep 8 on H100 (two nodes): world 16, FSDP 16, loss 16, ep 8, efsdp dp·cp·tp/ep = 2 (a pair, 544)
    # -> 4·688 + 544 = 3,296 MB; NVLS on FSDP's 8 in the node 16·2·8 = 256 (efsdp's pair spans nodes: none);
    # torchtitan's all-to-all among ep's 7 peers in the node
    parts = _parts(runtime_reserve("torchtitan", Parallel(dp=16, ep=8, fsdp=True), H100))
    assert parts["NCCL 5 communicators"] == 3296 and parts["NVLS"] == 256
    assert parts["NCCL send/receive"] == pytest.approx(7 * PEER / MB)


def test_balance_says_what_is_held_back_and_warns_on_a_tight_plan(tmp_path, capsys) -> None:
    # configs/llama3-8b.yaml on 12,994 MB with nothing held back (docs/balance.md's tight run, reserved_mb 0 in
    # place of 68,565): the balancer fills each stage, leaving less than the 3,788 MB this layout's runtime takes
    configs = Path(__file__).parent.parent / "configs"
    text = (configs / "llama3-8b.yaml").read_text()
    text = text.replace("config: hf/llama3-8b.json", f"config: {configs / 'hf' / 'llama3-8b.json'}")
    run = tmp_path / "run.yaml"
    run.write_text(text.replace("reserved_mb: 4000", "reserved_mb: 0, memory_mb: 12994"))
    assert main(["balance", str(run), "-q"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "held back 0 MB (device.reserved_mb); the runtime takes about 3,788 MB" in out
    assert "less than the 3,788 MB the runtime takes beyond device.reserved_mb 0" in out
    # held to --memory, the device's reserve is not the frame: nothing said of it
    assert main(["balance", str(run), "-q", "--memory", "12994"]) == 0
    assert "held back" not in capsys.readouterr().out
