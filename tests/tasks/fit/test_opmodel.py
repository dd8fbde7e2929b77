"""Operator models: fits recover the laws that generated the data, bands and ranges hold."""

import numpy as np
import pytest

from tasks.fit.opmodel import fit_operator, fit_operators
from tasks.model.projection.opmodel import MeasuredRange, predict


def _grid():
    """One-at-a-time variations around a baseline, as the calibration measures."""
    base = dict(h=512, heads=8, sl=256, b=1, tp=1)
    rows = [base]
    for k, values in dict(sl=[64, 128, 512, 1024], b=[2, 4, 8], h=[128, 256, 1024], tp=[2, 4, 8]).items():
        for v in values:
            rows.append({**base, k: v, **({"heads": v // 64} if k == "h" else {})})
    return {k: np.array([r[k] for r in rows], dtype=float) for k in base}


def _fc1_forward_law(c, alpha=20e-6, beta=3e-12, d_half=32.0):
    """FC1's forward GEMM written out by hand: 2 * (SL*B) * (4H/TP) * H FLOPs, its
    smallest dimension min(SL*B, 4H/TP, H)."""
    m, n, k = c["sl"] * c["b"], 4 * c["h"] / c["tp"], c["h"]
    return alpha + beta * 2 * m * n * k * (1 + d_half / np.minimum(np.minimum(m, n), k))


def test_fit_recovers_the_floor_rate_and_efficiency_of_a_known_law():
    configs = _grid()
    model = fit_operator("fc1.fwd", configs, _fc1_forward_law(configs))
    assert model.alpha_s == pytest.approx(20e-6, rel=0.05)
    assert model.beta_s == pytest.approx(3e-12, rel=0.02)
    assert model.d_half == pytest.approx(32.0, rel=0.1)
    assert model.max_rel_error < 0.01


def test_fit_keeps_the_algebras_exponents():
    # Data whose time grows as H^3 cannot be fitted by a class whose work grows as H^2:
    # the exponents are the algebra's, not learned.
    configs = _grid()
    cubic = 1e-12 * configs["sl"] * configs["b"] * configs["h"] ** 3 / configs["tp"]
    assert fit_operator("fc1.fwd", configs, cubic).max_rel_error > 0.3


def test_attention_scores_scale_with_the_square_of_sequence_length():
    configs = _grid()
    scores = 1e-11 * configs["b"] * configs["sl"] ** 2 * configs["h"] / configs["tp"] * 2  # 2*B*SL^2*H/TP FLOPs
    model = fit_operator("scores.fwd", configs, scores)
    assert model.max_rel_error < 0.01
    small = model.predict(512, 8, 1024, 1, 1)
    assert model.predict(512, 8, 2048, 1, 1) / small == pytest.approx(4.0, rel=0.01)


def test_memory_bound_classes_are_linear_in_their_elements_with_a_floor():
    configs = _grid()
    # Two LayerNorms per layer, each over the whole SL*B*H on every TP rank (no sequence parallelism).
    elements = 2 * configs["sl"] * configs["b"] * configs["h"]
    model = fit_operator("layernorm.fwd", configs, 50e-6 + 2e-9 * elements)
    assert model.alpha_s == pytest.approx(50e-6, rel=0.01) and model.beta_s == pytest.approx(2e-9, rel=0.01)


def test_projection_inside_the_measured_range_lies_within_its_band():
    rng = np.random.default_rng(7)
    configs = _grid()
    classes = {"fc1.fwd": _fc1_forward_law, "fc2.fwd": lambda c: _fc1_forward_law(c, alpha=30e-6)}
    noisy = {c: law(configs) * rng.lognormal(0.0, 0.03, len(configs["h"])) for c, law in classes.items()}
    models = fit_operators(configs, noisy)
    inside = dict(h=np.array([384.0, 768.0, 640.0]), heads=np.array([6.0, 12.0, 10.0]),
                  sl=np.array([192.0, 384.0, 512.0]), b=np.array([2.0, 3.0, 1.0]), tp=np.array([2.0, 1.0, 4.0]))
    truth = sum(law(inside) for law in classes.values())
    total, half_width = predict(models, classes, inside)
    assert np.all(np.abs(total - truth) <= half_width), (total, truth, half_width)
    assert np.all(half_width < 0.1 * total)  # and the band says something


def test_measured_range_flags_configurations_outside_it():
    box = MeasuredRange.of(_grid())
    flags = box.outside(dict(h=np.array([512, 4096, 512]), heads=np.array([8, 64, 8]), sl=np.array([256, 256, 8192]),
                             b=np.array([1, 1, 1]), tp=np.array([1, 1, 1])))
    assert flags.tolist() == [False, True, True]


def test_a_fit_needs_two_measurements():
    with pytest.raises(ValueError, match="at least 2"):
        fit_operator("fc1.fwd", {k: [1.0] for k in ("h", "heads", "sl", "b", "tp")}, [1e-3])


def test_a_class_that_ran_no_kernel_anywhere_is_a_model_of_zero_time():
    # Measured on an H200 (conf/data/device): the residual add's backward runs no kernel on a
    # GPU, so every configuration gives it 0 s; a fit used to refuse the whole calibration.
    configs = _grid()
    model = fit_operator("residual_add.bwd", configs, np.zeros(len(configs["h"])))
    assert (model.alpha_s, model.beta_s, model.points) == (0.0, 0.0, 0)
    assert np.all(model.predict(*(configs[k] for k in ("h", "heads", "sl", "b", "tp"))) == 0)
    with pytest.raises(ValueError, match="1 positive"):  # one time alone is still no fit
        fit_operator("residual_add.bwd", configs, np.r_[1e-5, np.zeros(len(configs["h"]) - 1)])


def test_accuracy_refuses_a_held_out_configuration_that_was_fitted():
    import pandas as pd

    from tasks.fit.accuracy import HeldOutLeak, accuracy_rows

    fitted = pd.DataFrame([dict(key="a", h=512, heads=8, sl=256, b=1, tp=1)])
    held = pd.DataFrame([dict(key="b", h=512, heads=8, sl=256, b=1, tp=1, plain_step_s=0.01, device_model="x")])
    with pytest.raises(HeldOutLeak, match="also used in the fit"):
        accuracy_rows("t", "id", {}, MeasuredRange.of(_grid()), fitted, held, judged_from_s=0.0)
