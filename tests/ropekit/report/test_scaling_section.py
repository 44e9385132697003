"""DeepSeek's MLA softmax scale in the scaling section (trial finding 7): the attention multiplies its logits by
m(s, mscale_all_dim)^2 outside the rotation, so the model's attention-factor bar and caption include it. The
families are read from transformers' own modeling files; the factor from transformers' formula."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from ropekit.analysis.schemes import scheme_table
from ropekit.analysis.softmax_scale import MLA_TYPES
from ropekit.presets import PRESETS
from ropekit.report import captions, figures
from ropekit.report.sources import resolve


def test_mla_families_are_those_whose_attention_applies_yarn_mscale() -> None:
    transformers = pytest.importorskip("transformers")
    models = Path(transformers.__file__).parent / "models"
    found: set[str] = set()
    for modeling in models.glob("*/modeling_*.py"):
        if "self.scaling = yarn_apply_mscale(" in modeling.read_text():
            for conf in modeling.parent.glob("configuration_*.py"):
                found |= set(re.findall(r'model_type = "([^"]+)"', conf.read_text()))
    assert found and found == MLA_TYPES


def _m(scale: float, mscale: float) -> float:  # transformers' yarn_get_mscale
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def test_deepseek_bar_and_caption_include_the_softmax_scale() -> None:
    src = resolve("deepseek-v3")
    want = _m(40, 1.0) ** 2  # mscale_all_dim 1: the logits grow by 1.874
    assert src.logit_scales == {"": pytest.approx(want, rel=1e-15)}
    spec = src.specs[""]
    table = scheme_table(spec, context=src.context, target=src.context)
    assert table.attention_factor["model:Yarn"] == pytest.approx(
        1.0
    )  # the tables' own: mscale / mscale_all_dim
    fig = figures.schemes_figure(table, "deepseek-v3", logit_scales={"model:Yarn": src.logit_scales[""]})
    bars = fig.axes[1].patches
    import matplotlib.pyplot as plt

    plt.close(fig)
    tops = {round(b.get_x(), 6): b.get_y() + b.get_height() for b in bars}
    assert max(tops.values()) == pytest.approx(math.sqrt(want), rel=1e-12)  # 1 x sqrt(1.874) = 1.369
    assert math.sqrt(want) == pytest.approx(_m(40, 1.0))  # as strong as plain YaRN's 0.1 ln 40 + 1
    text = captions.scaling_caption(table, spec, logit_scale=src.logit_scales[""])
    assert f"= {want:.4g} outside the rotation" in text and f"= {math.sqrt(want):.4g}" in text


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_only_mla_models_have_a_logit_scale(name: str) -> None:
    mt = PRESETS[name].config.get("model_type")
    assert bool(resolve(name).logit_scales) == (mt in MLA_TYPES), name  # gpt-oss, Qwen YaRN: none


def test_the_build_passes_the_scale_to_the_bar_caption_and_json() -> None:
    """build's scaling step for deepseek-v3 (drawing stubbed out): its JSON, caption and bar get the factor."""
    from ropekit.report import build

    src = resolve("deepseek-v3")
    at = build._Layer(src.context, src.context, None, None, src.logit_scales[""])
    data: dict[str, object] = {}
    added: list[tuple[str, str]] = []
    build._scaling(
        src.specs[""], at, False, "deepseek-v3", data, lambda k, c, _draw: added.append((k, c)), {}
    )
    scaling = data["scaling"]
    assert isinstance(scaling, dict)
    assert scaling["logit_scale"] == {"model:Yarn": src.logit_scales[""]}
    assert scaling["effective_attention_factor"]["model:Yarn"] == pytest.approx(_m(40, 1.0), rel=1e-12)
    assert scaling["attention_factor"]["model:Yarn"] == pytest.approx(1.0)
    ((key, caption),) = added
    assert key == "scaling" and "MLA's softmax scale" in caption
