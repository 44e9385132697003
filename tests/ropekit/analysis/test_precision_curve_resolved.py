"""The precision curve keeps, per position, the float64 reference's own error bound and whether it resolves
ropekit's error there (trial finding 5), as ``ropekit precision`` marks unresolved values ``*``."""

from __future__ import annotations

from ropekit import RopeSpec
from ropekit.analysis.precision import phase_error
from ropekit.analysis.precision_curve import precision_curve


def test_each_point_keeps_its_oracle_bound_and_resolution() -> None:
    spec = RopeSpec(16)  # theta_0 = 1: the bound p * 2^-53 passes 1e-8 between 10^7 and 10^8
    positions = (1_000, 10_000_000, 100_000_000)
    curve = precision_curve(spec, positions, window=4)
    bound = [p * 1.0 * 2.0**-53 for p in positions]  # Python floats: |largest angle| * 2^-53
    assert curve.oracle_bound.tolist() == bound
    assert curve.resolved.tolist() == [True, True, False]
    assert curve.resolved.tolist() == [phase_error(spec, p, window=4).resolved for p in positions]
    assert curve.ropekit_resolved_max == max(curve.ropekit[:2].tolist())
    d = curve.as_dict()
    assert d["oracle_bound"] == bound and d["resolved"] == [True, True, False]


def test_the_figure_draws_unresolved_points_hollow() -> None:
    import matplotlib.pyplot as plt

    from ropekit.report.figures import precision_figure

    curve = precision_curve(RopeSpec(16), (1_000, 10_000_000, 100_000_000), window=4)
    fig = precision_figure(curve, "x")
    lines = {ln.get_label(): ln for ln in fig.axes[0].get_lines()}
    plt.close(fig)
    assert list(lines["ropekit (exact phases)"].get_xdata()) == [1_000, 10_000_000]
    (hollow,) = [ln for k, ln in lines.items() if k.startswith("ropekit, not resolved")]
    assert list(hollow.get_xdata()) == [100_000_000] and hollow.get_markerfacecolor() == "none"
