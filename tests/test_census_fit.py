"""The census fit: bytes per token with a term that grows with the sequence, from a few shapes (no torch).

Every expected value is worked out by hand from the synthetic measurements.
"""

from __future__ import annotations

import pytest

from ppb_core.census.fit import FitError, Point, fit


def _bytes(batch: int, seq: int, base: float, per_seq: float, per_expert: float = 0.0, experts: int = 0) -> float:
    return batch * seq * (base + per_seq * seq + per_expert * experts)


def test_two_shapes_determine_base_and_sequence_term_exactly() -> None:
    # 1×64: 64·(5000 + 48·64) = 516,608 bytes; 1×128: 128·(5000 + 48·128) = 1,426,432 bytes.
    points = [Point(1, 64, 516_608.0), Point(1, 128, 1_426_432.0)]
    result = fit(points, ["base", "per_seq"])
    assert result.coefficients == pytest.approx({"base": 5000.0, "per_seq": 48.0})
    assert result.max_relative_residual == pytest.approx(0.0, abs=1e-12)
    # A larger shape, 2×512: 1024·(5000 + 48·512) = 30,285,824 bytes.
    assert result.predict(Point(2, 512, 0.0)) == pytest.approx(30_285_824.0)


def test_a_batch_independent_constant_shows_in_the_residual() -> None:
    # Bytes that do not grow with the tokens (a 4096-byte constant) do not fit bytes per token:
    # three shapes cannot all be met, and the residual says so.
    points = [Point(b, s, _bytes(b, s, 1000.0, 0.0) + 4096.0) for b, s in ((1, 64), (1, 128), (4, 128))]
    result = fit(points, ["base", "per_seq"])
    assert result.max_relative_residual > 0.01
    # Without the constant the same three shapes fit exactly.
    exact = fit([Point(b, s, _bytes(b, s, 1000.0, 2.0)) for b, s in ((1, 64), (1, 128), (4, 128))], ["base", "per_seq"])
    assert exact.max_relative_residual == pytest.approx(0.0, abs=1e-12)
    assert exact.coefficients == pytest.approx({"base": 1000.0, "per_seq": 2.0})


def test_expert_term_from_a_second_expert_count() -> None:
    # Router bytes grow with the routed experts: 24 bytes per token per expert over a base of 3000.
    points = [
        Point(1, 64, _bytes(1, 64, 3000.0, 0.0, 24.0, 16), experts=16),
        Point(1, 128, _bytes(1, 128, 3000.0, 0.0, 24.0, 16), experts=16),
        Point(1, 64, _bytes(1, 64, 3000.0, 0.0, 24.0, 32), experts=32),
    ]
    result = fit(points, ["base", "per_seq", "per_expert"])
    assert result.coefficients == pytest.approx({"base": 3000.0, "per_seq": 0.0, "per_expert": 24.0}, abs=1e-9)
    # At the model's 256 experts: 3000 + 24·256 = 9144 bytes per token.
    assert result.predict(Point(1, 1, 0.0, experts=256)) == pytest.approx(9144.0)


def test_tensor_parallel_terms_from_a_ranks_share() -> None:
    # 2000 bytes a token TP leaves whole, 6000 + 16·seq it splits: tp 2 keeps 2000 + 3000 + 8·seq.
    def held(batch: int, seq: int, tp: int) -> float:
        return batch * seq * (2000.0 + (6000.0 + 16.0 * seq) / tp)

    points = [Point(1, s, held(1, s, t), tp=t) for s in (64, 128) for t in (1, 2)]
    result = fit(points, ["base", "per_seq", "base_tp", "per_seq_tp"])
    assert result.coefficients == pytest.approx(
        {"base": 2000.0, "per_seq": 0.0, "base_tp": 6000.0, "per_seq_tp": 16.0}, abs=1e-8
    )


def test_undetermined_terms_are_refused() -> None:
    # One sequence length cannot separate the base from the sequence term.
    with pytest.raises(FitError):
        fit([Point(1, 64, 1000.0), Point(2, 64, 2000.0)], ["base", "per_seq"])
    with pytest.raises(FitError):
        fit([], ["base"])
    with pytest.raises(ValueError, match="unknown fit terms"):
        fit([Point(1, 64, 1.0)], ["nope"])
