"""One Megatron-Core MoE layer, forward and backward, on 8 H100: Megatron CI's measured baselines against ppb.

    python bench/moe_layer_perf.py [--ops]

The measurement is Megatron-LM's MoE-layer performance test (NVIDIA/Megatron-LM,
tests/functional_tests/test_cases/common/moe_perf/, added in cf39a4ddcf on 2025-12-17; baseline.json unchanged
since, read at d98e8a64): per case one `MoELayer`'s forward and backward milliseconds and its
`torch.cuda.max_memory_allocated`, each the mean of 20 iterations after 5 warm-up ones, CUDA events, on a
`dgx_h100` node of 8 GPUs (tests/test_utils/recipes/module_performance.yaml at cf39a4ddcf; the `dev` container,
whose TransformerEngine release is not stated). What `__main__.py` times (`_benchmark_moe_layer`):

- the forward is `layer(input_tensor)` alone: the router, the dispatcher (permutation, all-to-all or DeepEP /
  HybridEP dispatch), the local experts (`TEGroupedMLP`), the combine and unpermutation. No attention, no
  pre-MLP norm, no residual add (those are `TransformerLayer`'s). Each iteration first runs an 8192² fp32
  matmul ("a long CUDA kernel to hide the router launch overhead"), so the host is ahead of the GPU when the
  forward starts; no CUDA graphs; the garbage collector off (`manual_gc`).
- the backward is `output.backward(grad)`: every op's input and weight gradients. The layer has no DDP
  wrapper, so no main-gradient buffer: TE's weight-gradient GEMMs write a 16-bit `.grad`
  (`gradient_accumulation_fusion` is False in the test's `TransformerConfig`), with no hook adding it anywhere.
  ppb prices the training default instead (the GEMM accumulating into an fp32 main gradient): at these shapes
  the GEMMs are compute-bound, the output's bytes below their floor, so the two price alike.
- the settings (`_build_transformer_config`, test_cases.py; cited at each value in `CASES` below). What a
  reader of test_cases.py would not expect: the `TransformerConfig` is built without `gated_linear_unit` or
  `activation_func`, so the experts are GeLU MLPs with one up-projection (transformer_config.py defaults,
  `gated_linear_unit = False`, `activation_func = F.gelu`), not SwiGLU; the DeepSeek proxy's
  `moe_shared_expert_intermediate_size` is not passed on, so it has no shared expert; and the load-balancing
  type is `aux_loss` at coefficient 1.0 for both proxies, whatever the proxy's own field says.

ppb prices the same layer with its own op table and kernels (`TimeModel.breakdown` of a one-layer model's
MoE block, less the pre-MLP norm and the residual add), and the host's waits as `TimeModel.host` sets them
(`ppb_core.timing.host`): after the dispatcher's synchronization in the forward the rest of the layer's
launches, launch by launch (`dispatcher_waits`, not wrapped to a next layer: the test has none), and in the
backward the launches beyond the GPU's work (`host_excess_s`). What ppb cannot state: the test's
TransformerEngine and DeepEP releases (the dev container's), the H100 variant beyond DGX (priced as the SXM),
and the GPU's clocks in this loop (the dummy fp32 matmul runs between iterations).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _measure import machine  # noqa: E402

from ppb_core.config.run import RunConfig, parse_run_config  # noqa: E402
from ppb_core.memory import MemoryModel  # noqa: E402
from ppb_core.model.walk import BODY  # noqa: E402
from ppb_core.timing.host import dispatcher_waits, host_excess_s  # noqa: E402
from ppb_core.timing.iteration import configured_states  # noqa: E402
from ppb_core.timing.pricer import TimeModel  # noqa: E402

SOURCE = "NVIDIA/Megatron-LM tests/functional_tests/test_cases/common/moe_perf (cf39a4ddcf; at d98e8a64)"


@dataclass(frozen=True)
class MoEProxy:
    """A `MoEModelConfig` of test_cases.py, the fields the test's `TransformerConfig` reads."""

    hidden_size: int
    moe_ffn_hidden_size: int
    num_experts: int
    router_topk: int
    score_function: str
    num_groups: int | None
    group_topk: int | None
    expert_bias: bool


# test_cases.py (cf39a4ddcf = d98e8a64): MIXTRAL_PROXY and DEEPSEEK_PROXY; seq_length 4096, micro_batch_size 1
# for both; moe_router_dtype "fp32" for both (MIXTRAL by the dataclass default). DEEPSEEK_PROXY's
# moe_shared_expert_intermediate_size (2048) and its "seq_aux_loss" are not read by `_build_transformer_config`.
PROXIES = {
    "mixtral": MoEProxy(4096, 14336, 8, 2, "softmax", None, None, False),
    "deepseek": MoEProxy(7168, 2048, 32, 8, "sigmoid", 8, 4, True),
}
# The code that measured the baselines: the merge commit cf39a4ddcf (2025-12-17); its dev image
# (docker/Dockerfile.ci.dev, docker/.ngc_version.dev: nvcr.io/nvidia/pytorch:25.09-py3, PyTorch 2.9) with
# Transformer Engine from pyproject.toml's `release_v2.10` branch and DeepEP / HybridEP from DeepEP's hybrid-ep
# branch. At that Megatron-Core DeepEP's permutation does not pad the experts' rows to FP8's alignment
# (`releases.CHANGES["deepep_permute_pads"]`, 2026-02-07): TEGroupedMLP's Fp8Padding copies them.
RELEASES = {"megatron_core": "2025-12-17", "transformer_engine": "2.10", "pytorch": "2.9"}
SEQ_LENGTH = 4096
MICRO_BATCH_SIZE = 1
EP = 8  # expert_model_parallel_size 8, tensor_model_parallel_size 1, on 8 GPUs: data-parallel 8
TP = 1


@dataclass(frozen=True)
class MoEPerfCase:
    """A `MoEPerformanceCase` of test_cases.py: its proxy, its dispatcher as ppb names it, FP8 or BF16, and the
    settings every case shares there (permute and router fusion, forced balancing: the dataclass defaults)."""

    name: str
    proxy: str
    dispatcher: str  # token_dispatcher "alltoall", or "flex" with moe_flex_dispatcher_backend deepep / hybridep
    fp8: bool  # fp8 "e4m3", fp8_recipe "blockwise"; the test then sets fp8 "hybrid", recipe "blockwise"
    permute_fusion: bool = True
    router_fusion: bool = True
    force_balance: bool = True


CASES = tuple(
    MoEPerfCase(f"{proxy}_{short}_tp1ep8_{precision}", proxy, dispatcher, precision == "fp8")
    for precision in ("fp8", "bf16")
    for proxy in ("mixtral", "deepseek")
    for short, dispatcher in (("a2a", "alltoall"), ("deepep", "deepep"), ("hybridep", "hybridep"))
)

# baseline.json (cf39a4ddcf, unchanged at d98e8a64): forward_ms, backward_ms, max_allocated_bytes
MEASURED = {
    "deepseek_a2a_tp1ep8_bf16": (7.119169592857361, 10.482670497894286, 3442750464),
    "deepseek_a2a_tp1ep8_fp8": (7.609272027015686, 10.126460886001587, 4412930560),
    "deepseek_deepep_tp1ep8_bf16": (5.681718397140503, 9.055137538909912, 2445288448),
    "deepseek_deepep_tp1ep8_fp8": (6.034772801399231, 8.60211353302002, 3707410944),
    "deepseek_hybridep_tp1ep8_bf16": (5.390828824043274, 8.795001602172851, 2424369664),
    "deepseek_hybridep_tp1ep8_fp8": (5.142886424064637, 7.6874864339828495, 2652078464),
    "mixtral_a2a_tp1ep8_bf16": (4.32688798904419, 7.684332823753357, 2890180198.4),
    "mixtral_a2a_tp1ep8_fp8": (3.7876319885253906, 6.618246412277221, 3095914086.4),
    "mixtral_deepep_tp1ep8_bf16": (4.635550403594971, 7.854356813430786, 2890295808),
    "mixtral_deepep_tp1ep8_fp8": (4.101150441169739, 6.82720000743866, 3095448064),
    "mixtral_hybridep_tp1ep8_bf16": (4.342604804039001, 7.740782427787781, 2889559552),
    "mixtral_hybridep_tp1ep8_fp8": (3.7007392168045046, 6.57167682647705, 3095269376),
}

# ppb's ops of a MoE block that are not `MoELayer`'s: the pre-MLP norm and the residual add (TransformerLayer's)
OUTSIDE_MOE_LAYER = ("norm2", "residual_moe")
# the op classes of the decomposition, by the op's name in ppb's MoE table (`ppb_core.timing.flops.moe_ops`)
TERMS = (
    ("router GEMM", ("router",)),
    ("router top-k, aux loss", ("router_topk",)),
    ("permute + unpermute", ("dispatch_map", "permute", "unpermute")),
    ("FP8 padding", ("experts_pad", "experts_pad_probs", "experts_unpad")),
    ("dispatch + combine", ("dispatch", "combine")),
    ("expert GEMMs", ("experts_in", "experts_out")),
    ("expert activation", ("experts_act",)),
    ("gradient sums", ("moe_sums",)),
)


def case_raw(case: MoEPerfCase) -> dict[str, Any]:
    """The run config of *case* as ppb states it (module docstring; each value's source beside it)."""
    proxy = PROXIES[case.proxy]
    spec: dict[str, Any] = {
        "vocab_size": 32000,  # no embedding in the test; any
        "hidden_size": proxy.hidden_size,
        "num_layers": 1,  # num_layers=1
        "num_attention_heads": 8,  # MoEModelConfig default; no attention in the test
        "intermediate_size": proxy.moe_ffn_hidden_size,
        "moe_intermediate_size": proxy.moe_ffn_hidden_size,
        "num_experts": proxy.num_experts,
        "experts_per_token": proxy.router_topk,
        "activation": "gelu",  # TransformerConfig defaults: gated_linear_unit False, activation_func F.gelu
    }
    if proxy.num_groups:
        spec.update(expert_groups=proxy.num_groups, expert_group_limit=proxy.group_topk)
    router = {
        "score_function": proxy.score_function,
        "aux_losses": ["aux_loss"],  # moe_router_load_balancing_type "aux_loss", moe_aux_loss_coeff 1.0
        "expert_bias": proxy.expert_bias,
        "fusion": case.router_fusion,
        "force_balance": case.force_balance,
    }
    timing: dict[str, Any] = {"moe_dispatcher": case.dispatcher}
    if case.fp8:
        timing.update(matmul_dtype="fp8", fp8_recipe="blockwise")
    return {
        "name": case.name,
        "framework": "megatron",
        "models": [{"name": case.proxy, "spec": spec}],
        "parallel": {"dp": 8 // TP, "tp": TP, "ep": EP},
        "training": {
            "seq_length": SEQ_LENGTH,
            "micro_batch_size": MICRO_BATCH_SIZE,
            "moe": {"router_dtype": "fp32", "permute_fusion": case.permute_fusion, "router": router},
        },
        "device": {"name": "h100-80gb"},  # dgx_h100
        "framework_release": dict(RELEASES),
        "timing": timing,
    }


def case_run(case: MoEPerfCase) -> RunConfig:
    return parse_run_config(case_raw(case), f"moe_perf {case.name}")


@dataclass(frozen=True)
class Priced:
    """ppb's price of one case's `MoELayer`: GPU milliseconds by op and pass, and the host's waits."""

    op_ms: dict[tuple[str, str], float]  # (op, "forward" | "backward") -> ms
    host_forward_ms: float
    host_backward_ms: float

    def gpu_ms(self, phase: str) -> float:
        return sum(ms for (_, each), ms in self.op_ms.items() if each == phase)

    def term_ms(self, names: tuple[str, ...], phase: str) -> float:
        return sum(self.op_ms.get((name, phase), 0.0) for name in names)

    @property
    def forward_ms(self) -> float:
        return self.gpu_ms("forward") + self.host_forward_ms

    @property
    def backward_ms(self) -> float:
        return self.gpu_ms("backward") + self.host_backward_ms


def price(case: MoEPerfCase) -> Priced:
    """ppb's forward and backward of the case's MoE layer alone (module docstring)."""
    run = case_run(case)
    times = TimeModel(run)
    layer, (state, switches) = next(
        (layer, state)
        for layer, state in configured_states(run, MemoryModel(run)).items()
        if layer.node == BODY and layer.kind.name == "moe"
    )
    ops = [op for op in times.ops(layer) if op.block == "moe" and op.name.rsplit(".", 1)[-1] not in OUTSIDE_MOE_LAYER]
    names = {op.name for op in ops}
    op_ms: dict[tuple[str, str], float] = defaultdict(float)
    for timed in times.breakdown(layer, state, switches):
        if timed.name in names:
            op_ms[(timed.name.rsplit(".", 1)[-1], timed.phase)] += timed.ms
    prices = times.op_prices(layer)
    forward_s = {op.name: prices[op.name].forward_ms / 1e3 for op in ops}
    launches = times.launches(layer)
    launch_s = times.launch_s()
    waits = dispatcher_waits(
        ops,
        forward_s,
        launch_s,
        run.training.moe.dropless,
        {op.name: launches[op.name][0] for op in ops},
        wrap=False,
        dispatcher=run.timing.moe_dispatcher,
    )
    backward_gpu_s = sum(prices[op.name].backward_ms for op in ops) / 1e3
    backward_wait = host_excess_s(backward_gpu_s, sum(launches[op.name][1] for op in ops), launch_s)
    return Priced(dict(op_ms), sum(wait for wait, _ in waits) * 1e3, backward_wait * 1e3)


def error(ours: float, measured: float) -> str:
    return f"{ours / measured - 1:+6.1%}"


def main(argv: list[str]) -> int:
    show_ops = "--ops" in argv
    print(f"machine: {machine()}")
    print(f"measured: {SOURCE}, baseline.json, 8 H100 (dgx_h100)")
    print(
        f"{'case':30s} {'fwd meas':>8s} {'ppb':>6s} {'err':>7s} {'(host)':>7s}   "
        f"{'bwd meas':>8s} {'ppb':>6s} {'err':>7s} {'(host)':>7s}   {'max alloc GiB':>13s}"
    )
    errors = []
    priced = {}
    for case in CASES:
        forward, backward, allocated = MEASURED[case.name]
        ours = priced[case.name] = price(case)
        errors += [ours.forward_ms / forward - 1, ours.backward_ms / backward - 1]
        print(
            f"{case.name:30s} {forward:8.3f} {ours.forward_ms:6.3f} {error(ours.forward_ms, forward)} "
            f"{ours.host_forward_ms:7.3f}   {backward:8.3f} {ours.backward_ms:6.3f} "
            f"{error(ours.backward_ms, backward)} {ours.host_backward_ms:7.3f}   {allocated / 2**30:13.3f}"
        )
    mean = sum(abs(e) for e in errors) / len(errors)
    signed = sum(errors) / len(errors)
    print(f"mean abs error over {len(errors)} figures {mean:.1%} (signed {signed:+.1%})")
    print("(max allocated: the test's allocator peak; ppb's memory model prices a training stage, not this loop)")
    print()
    print("ppb's GPU ms by term, forward / backward:")
    print(f"{'case':30s} " + " ".join(f"{label[:18]:>18s}" for label, _ in TERMS))
    for case in CASES:
        ours = priced[case.name]
        cells = [f"{ours.term_ms(names, 'forward'):7.3f}/{ours.term_ms(names, 'backward'):<7.3f}" for _, names in TERMS]
        print(f"{case.name:30s} " + " ".join(f"{cell:>18s}" for cell in cells))
    print()
    print("differences between cases, measured against ppb (forward / backward ms):")
    for left, right, what in PAIRS:
        m_left, m_right = MEASURED[left], MEASURED[right]
        p_left, p_right = priced[left], priced[right]
        print(
            f"  {what:44s} measured {m_right[0] - m_left[0]:+6.3f} / {m_right[1] - m_left[1]:+6.3f}, "
            f"ppb {p_right.forward_ms - p_left.forward_ms:+6.3f} / {p_right.backward_ms - p_left.backward_ms:+6.3f}"
        )
    if show_ops:
        print()
        for case in CASES:
            print(case.name)
            for (name, phase), ms in sorted(priced[case.name].op_ms.items()):
                if ms:
                    print(f"  {name:20s} {phase:9s} {ms:7.3f}")
    print()
    print(json.dumps({"mean_abs_error": round(mean, 4), "signed": round(signed, 4)}))
    return 0


# pairs of cases that differ in one setting: what the measured difference says about one term
PAIRS = tuple(
    (f"{proxy}_{a}_tp1ep8_{pa}", f"{proxy}_{b}_tp1ep8_{pb}", f"{proxy} {what}")
    for proxy in ("mixtral", "deepseek")
    for a, pa, b, pb, what in (
        ("a2a", "bf16", "a2a", "fp8", "alltoall: BF16 -> FP8 blockwise"),
        ("hybridep", "bf16", "hybridep", "fp8", "hybridep: BF16 -> FP8 blockwise"),
        ("deepep", "bf16", "deepep", "fp8", "DeepEP: BF16 -> FP8 blockwise"),
        ("hybridep", "bf16", "deepep", "bf16", "BF16: HybridEP -> DeepEP"),
        ("a2a", "bf16", "deepep", "bf16", "BF16: alltoall -> DeepEP"),
        ("a2a", "bf16", "hybridep", "bf16", "BF16: alltoall -> HybridEP"),
    )
)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
