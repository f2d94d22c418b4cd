"""MindFormers' fine_grain_interleave 2: the tensor-parallel collectives of two sequence halves as MindSpore orders
them (pricer.py `TimeModel._interleaved_halves`), worked by hand from mindformers/models/llama/llama_interleave.py
(a4dfb8219: each layer's projections, norms, adds and MLP as halves A and B) and MindSpore's
frontend/parallel/pass/micro_interleaved_order_control.cc (`InsertInterleavedNodesDepend`: A's compute after
its collective i waits for B's compute before B's collective i; B's after i for A's before i + 1;
`InsertDependBetweenInterleavedNodes`: the collectives run A0, B0, A1, B1, ...)."""

from __future__ import annotations

import pytest

from ppb_core.config.run import parse_run_config
from ppb_core.errors import InputError
from ppb_core.model.walk import walk
from ppb_core.timing.comm import collective_seconds
from ppb_core.timing.pricer import TimeModel

SPEC = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "num_layers": 4,
    "num_attention_heads": 32,
    "intermediate_size": 11008,
}


def _run(interleave: int | None, framework: str = "mindformers"):
    timing = {"overlap": {"tp": 1.0}} | ({"fine_grain_interleave": interleave} if interleave else {})
    return parse_run_config(
        {
            "name": "fine-grain",
            "framework": framework,
            "models": [{"name": "llm", "spec": SPEC}],
            "parallel": {"tp": 4, "sequence_parallel": True},
            "training": {"seq_length": 4096, "flash_attention": True, "dtype": "bf16"},
            "device": {"name": "ascend-910b"},
            "timing": timing,
        }
    )


def _collectives(model: TimeModel, overlap: str):
    """(collective, its partner GEMM's seconds in the partner's phase, op table) of a body layer."""
    layer = next(layer for layer in walk(model.run) if layer.node == "BODY")
    by_name = {op.name: op for op in model.ops(layer)}
    found = []
    for op in by_name.values():
        for comm in (op.forward_comm, op.backward_comm):
            if comm is None or comm.overlap != overlap or comm.partner is None:
                continue
            partner = by_name[comm.partner[0]]
            if partner.category == "matmul":
                found.append((comm, model._phase_s(partner, comm.partner[1]), by_name))
    return found


def _beside(c: float, g: float, k: float) -> float:
    """A collective of c seconds wholly beside g seconds of compute that loses k of its speed while they overlap:
    c - min(c, g) exposed, plus k of the overlapped part (TimeModel._beside_s at share 1)."""
    return max(c - g, k * min(c, g))


# Each collective's side that hides it: the compute of one half between it and the next collective on its GEMM's
# side (llama_interleave.py: `linear_layer1` = norm, Q/K/V; attention whole, `cal_attn`; `linear_layer2` = output
# projection, add, norm, MLP, add), as ppb names a LLaMA layer's ops: the attention's entry gather its readers
# Q·K and V (and the rotary between them); the output projection's reduce-scatter that projection alone (the
# attention core before it runs whole); the MLP's gather and reduce-scatter the whole MLP (in, activation, out);
# backward, the output gradient's gathers the same ops' backward.
SEGMENTS = {
    ("gather_attention", "forward"): ("qk_proj", "rope", "v_proj"),
    ("reduce_attention", "forward"): ("out_proj",),
    ("gather_mlp", "forward"): ("mlp_in", "mlp_act", "mlp_out"),
    ("reduce_mlp", "forward"): ("mlp_out", "mlp_act", "mlp_in"),
    ("reduce_attention", "backward"): ("out_proj",),
    ("reduce_mlp", "backward"): ("mlp_out", "mlp_act", "mlp_in"),
}


def test_half_of_each_collective_is_exposed_and_half_hides_behind_half_its_segment():
    # A layer's attention entry all-gather, output-projection reduce-scatter, MLP entry all-gather and MLP exit
    # reduce-scatter (forward), and the exits' all-gathers of the output gradient (backward): A's half runs beside
    # B's compute before it, B's beside A's compute after it. One side is half the segment of its GEMM (one half's
    # share of the ops above), the other the residual add and norm, taken as nothing: c/2 exposed + c/2 beside
    # that half segment.
    model = TimeModel(_run(2))
    k = model.kernels.contention
    layer = next(layer for layer in walk(model.run) if layer.node == "BODY")
    by_name = {op.name: op for op in model.ops(layer)}
    seen = set()
    for op in by_name.values():
        for phase, comm in (("forward", op.forward_comm), ("backward", op.backward_comm)):
            if comm is None or comm.overlap != "tp":
                continue
            names = SEGMENTS[op.name, phase]
            segment = sum(model._phase_s(by_name[name], phase) for name in names) / 2
            c = collective_seconds(comm, model.links)
            assert model._exposed_s(comm, by_name) == pytest.approx(c / 2 + _beside(c / 2, segment, k))
            seen.add((op.name, phase))
    assert seen == set(SEGMENTS)
    # unsliced (the same run without the word): each collective wholly beside its GEMM (overlap.tp 1)
    plain = TimeModel(_run(None))
    for comm, g, by_name in _collectives(plain, "tp"):
        c = collective_seconds(comm, plain.links)
        assert plain._exposed_s(comm, by_name) == pytest.approx(_beside(c, g, k))


def test_a_collective_as_long_as_its_segment_shows_half_of_itself():
    # c = g (g the segment): the halves A (c/2 beside g/2) and B (c/2 beside the add and norm): c/2 + k·c/2;
    # unsliced k·c
    assert 0.5 + _beside(0.5, 0.5, 0.1) == pytest.approx(0.55)
    assert _beside(1.0, 1.0, 0.1) == pytest.approx(0.1)


def test_the_entry_reduce_scatter_beside_the_weight_gradient_is_unchanged():
    # the all-gathers' backward reduce-scatters run beside the consumer's weight gradient (tp_async)
    sliced, plain = TimeModel(_run(2)), TimeModel(_run(None))
    ours = [sliced._exposed_s(comm, by_name) for comm, _, by_name in _collectives(sliced, "tp_async")]
    theirs = [plain._exposed_s(comm, by_name) for comm, _, by_name in _collectives(plain, "tp_async")]
    assert ours and ours == pytest.approx(theirs)


def test_the_word_is_mindformers_only():
    with pytest.raises(InputError) as err:
        _run(2, framework="megatron")
    assert err.value.field == "timing.fine_grain_interleave"
    assert "\n" not in str(err.value)
