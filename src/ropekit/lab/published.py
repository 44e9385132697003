# SPDX-License-Identifier: MIT
"""The claims the lab judges, each with the published figure it comes from and the quantity the lab measures.

Numbers are quoted from ``shared/reference/papers.md`` (paper, table, entries); ratios are computed here from the
quoted entries, which are written out beside them. Where papers.md has no figure the row says "not in papers.md"
and cites the paper (or the seed) only. Each row's ``claim`` is the start of the claim text of a verdict that the
experiment's ``claims()`` returns (:mod:`ropekit.lab.claims_table` matches them; a test checks every row matches).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ROWS", "Row"]


@dataclass(frozen=True)
class Row:
    topic: str  # extrapolation | scaling | frequencies | passkey | counter-examples | vision
    experiment: str  # the results file stem whose claims() judges it
    claim: str  # the verdict's claim text starts with this
    published: str  # paper, table / figure, numbers
    quantity: str  # what the lab measures, and the test


def _r(a: float, b: float) -> str:
    return f"{a:g}/{b:g} = {a / b:.2f}"


_ALIBI = "ALiBi Table 2 (WikiText-103, 247M, L_train 512)"
_NIP = "not in papers.md"
ROWS: tuple[Row, ...] = (
    Row(
        "extrapolation",
        "extrapolation",
        "learned absolute positions break past their table",
        f"{_NIP} (seed 003; papers.md E1 expects learned absolute positions to degrade at once)",
        "ppl(2x)/ppl(1x) of learned > 1.2 on every seed",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "sinusoidal extrapolates worse than RoPE",
        f"{_ALIBI}, ppl at 2512 / at 512: sinusoidal {_r(132.41, 20.05)}, Rotary {_r(31.58, 20.07)}",
        "ppl(4x)/ppl(1x), sinusoidal vs rope, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "RoPE degrades beyond the trained length",
        f"{_ALIBI}: Rotary at 7512 / at 512 {_r(51.12, 20.07)}; Kazemnejad et al. 2023 (1.3B code model, "
        f"trained at 1024): RoPE at 1400 / at 1024 {_r(251.684, 2.146)}",
        "ppl(8x)/ppl(1x) of rope > 1.2 on every seed",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "alibi extrapolates: within 10% of its 1x perplexity at 8x",
        f"{_ALIBI}: ALiBi at 7512 / at 512 {_r(18.33, 19.73)}",
        "ppl(8x)/ppl(1x) of alibi < 1.1 on every seed",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "kerple-log extrapolates: within 10% of its 1x perplexity at 8x",
        f"{_NIP} (Chi et al. 2022; papers.md gives Kerple's formula only)",
        "ppl(8x)/ppl(1x) of kerple-log < 1.1 on every seed",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "alibi degrades less than RoPE at 2x",
        f"{_ALIBI}, ppl at 1012 / at 512: ALiBi {_r(18.73, 19.73)}, Rotary {_r(21.37, 20.07)}",
        "ppl(2x)/ppl(1x), rope vs alibi, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "nope degrades less than RoPE at 2x",
        f"Kazemnejad et al. 2023 (1.3B code model, trained at 1024), ppl at 1400 / at 1024: NoPE "
        f"{_r(2.121, 2.187)}, RoPE {_r(251.684, 2.146)}",
        "ppl(2x)/ppl(1x), rope vs nope, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "xpos degrades less than RoPE at 4x",
        f"{_NIP} (Sun et al. 2022; papers.md has xPos's formula and Xiong et al. Table 5 at 32k only: "
        "xPos-ABF 6.331 vs ABF 6.323 on Books)",
        "ppl(4x)/ppl(1x), rope vs xpos, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "fire degrades less than RoPE at 4x",
        f"{_NIP} (Li et al. 2023; papers.md gives FIRE's formula only)",
        "ppl(4x)/ppl(1x), rope vs fire, spreads apart",
    ),
    Row(
        "counter-examples",
        "extrapolation",
        "seed 004's counter-example single-frequency extrapolates worse than RoPE at 2x",
        f"{_NIP} (seed 004 sec. 8.2, an argument without a figure)",
        "ppl(2x)/ppl(1x), single-frequency vs rope, spreads apart",
    ),
    Row(
        "counter-examples",
        "extrapolation",
        "seed 004's counter-example dense-rotation extrapolates worse than RoPE at 2x",
        f"{_NIP} (seed 004 sec. 8.3, an argument without a figure)",
        "ppl(2x)/ppl(1x), dense-rotation vs rope, spreads apart",
    ),
    Row(
        "extrapolation",
        "extrapolation",
        "degradation at 4x orders ALiBi < T5 < RoPE < sinusoidal",
        f"{_ALIBI}, ppl at 2512 / at 512: ALiBi {_r(18.41, 19.73)}, T5 {_r(20.41, 19.65)}, Rotary "
        f"{_r(31.58, 20.07)}, sinusoidal {_r(132.41, 20.05)}",
        "ppl(4x)/ppl(1x), each neighbouring pair's spreads apart in that order",
    ),
    *(
        Row(
            "scaling",
            "scaling",
            f"{name} beats unscaled RoPE zero-shot at 4x",
            published,
            f"fraction of unscaled RoPE's degradation at 4x recovered by {name} > 0 on every seed",
        )
        for name, published in (
            (
                "linear",
                "PI Tables 1, 3 (LLaMA-7B, 2048 -> 8192): unscaled > 1e3 at 4096-32768; zero-shot PI 16.10 at 8192",
            ),
            ("ntk", f"{_NIP} as a number (YaRN sec. 3: NTK-aware is better than PI zero-shot)"),
            (
                "dynamic",
                (
                    "LongRoPE Table 1 (LLaMA2-7B 4k, no fine-tuning, PG19 at 16k = 4x): Dynamic-NTK 23.29 (PI 20.49); "
                    "the unscaled model's figure is not in papers.md"
                ),
            ),
            (
                "yarn",
                (
                    "LongRoPE Table 1 (LLaMA2-7B 4k, no fine-tuning, PG19 at 16k = 4x): YaRN 87.89 (PI 20.49); "
                    "the unscaled model's figure is not in papers.md"
                ),
            ),
            ("llama3", f"{_NIP} (the Llama 3.1 rule's reference code only)"),
        )
    ),
    Row(
        "scaling",
        "scaling",
        "NTK-aware beats PI zero-shot at 2x",
        "no NTK-aware figure in papers.md; LongRoPE Table 1 (LLaMA2-7B 4k, no fine-tuning, PG19 at 8k = 2x): "
        "Dynamic-NTK 10.21 vs PI 10.65",
        "fraction recovered at 2x, ntk vs linear, spreads apart",
    ),
    Row(
        "scaling",
        "scaling",
        "a short fine-tune makes PI good at 4x",
        "PI Table 3 (LLaMA-7B, 2048 -> 8192): ppl at 8192 16.10 before, 7.12 after 200 fine-tuning steps "
        "(Table 1: 7.20 at 2048 before extension)",
        "fraction recovered at 4x by PI after fine-tuning > 0.9 on every seed",
    ),
    Row(
        "scaling",
        "scaling",
        "after fine-tuning YaRN is at least as good as PI at 4x",
        "YaRN Table 1 (Llama-2-7B 4k -> 8k, fine-tuned, Proof-pile): at 8192 YaRN 3.35, PI 3.34; at 4096 "
        "YaRN 3.50, PI 3.51",
        "ppl_yarn(4x)/ppl_PI(4x) after fine-tuning < 1.01 on every seed",
    ),
    Row(
        "frequencies",
        "frequencies",
        "low-frequency bands carry the largest q norms",
        f"{_NIP} as a number (Barbero et al. 2025: Gemma-7B puts most q/k norm on the lowest frequencies)",
        "mean norm of q, lowest-frequency third / highest-frequency third > 1 on every seed (RoPE model)",
    ),
    Row(
        "frequencies",
        "frequencies",
        "positional heads rely on the highest-frequency bands",
        f"{_NIP} as a number (Barbero et al. 2025: Gemma-7B's diagonal and previous-token heads use the highest "
        "frequencies)",
        "fraction of positional heads whose top band is in the highest-frequency third > 0.5 on every seed",
    ),
    Row(
        "frequencies",
        "frequencies",
        "NoPE has the highest loss",
        "Barbero et al. Table 2 (Gemma 2B from scratch, Wiki ppl): NoPE 4.8594, RoPE 4.4627, 0.25-RoPE 4.5302, "
        "0.75-RoPE 4.4414",
        "loss(NoPE) - lowest p-RoPE loss at 1x > 0 on every seed",
    ),
    Row(
        "frequencies",
        "frequencies",
        "0.75-RoPE beats RoPE",
        "Barbero et al. Table 2: 0.75-RoPE 4.4414 vs RoPE 4.4627 (Wiki), 6.4422 vs 6.4429 (FlanV2)",
        "loss(RoPE) - loss(0.75-RoPE) at 1x > 0 on every seed (paired by seed)",
    ),
    Row(
        "frequencies",
        "frequencies",
        "0.25-RoPE is worse than 0.75-RoPE",
        "Barbero et al. Table 2: 0.25-RoPE 4.5302 vs 0.75-RoPE 4.4414 (Wiki), 6.5111 vs 6.4422 (FlanV2)",
        "loss(0.25-RoPE) - loss(0.75-RoPE) at 1x > 0 on every seed (paired by seed)",
    ),
    Row(
        "passkey",
        "passkey",
        "RoPE retrieves the key in-distribution",
        f"{_NIP} for an unextended model; YaRN Table 5: Together-7B (PI, 32k) 100 % within its context",
        "accuracy at 1x of rope > 0.5 on every seed",
    ),
    Row(
        "passkey",
        "passkey",
        "RoPE fails past its training length",
        "PI Table 4 (LLaMA-7B, 2048 -> 8192): fine-tuning without PI reaches an effective passkey window of 1792 "
        "after 200 steps, 2560 after 10 000; PI the full 8192 after 200",
        "accuracy at 8x of rope < 0.5 on every seed",
    ),
    Row(
        "passkey",
        "passkey",
        "ALiBi's local bias does not give long-range retrieval",
        f"{_NIP} (papers.md E5 expects it)",
        "accuracy at 8x of alibi < 0.5 on every seed",
    ),
    Row(
        "passkey",
        "passkey",
        "NoPE generalises past the training length better than RoPE",
        "Kazemnejad et al. 2023 (10 synthetic tasks, trained <= 20, tested to 2L): mean reciprocal rank NoPE "
        "0.69, RoPE 0.33",
        "accuracy at 2x, nope vs rope, spreads apart",
    ),
    Row(
        "counter-examples",
        "invariance",
        "RoPE is relative",
        f"{_NIP} (seed 004, theorem 1)",
        "shift error of rope < 1e-4 on every draw of q, k",
    ),
    Row(
        "counter-examples",
        "invariance",
        "a single frequency is still relative",
        f"{_NIP} (seed 004 sec. 8.2)",
        "shift error of single-frequency < 1e-4 on every draw",
    ),
    Row(
        "counter-examples",
        "invariance",
        "a single frequency cannot tell distances apart",
        f"{_NIP} (seed 004 sec. 8.2)",
        "confusability, rope vs single-frequency, spreads apart",
    ),
    Row(
        "counter-examples",
        "invariance",
        "a dense rotation family that is not a group breaks relative position",
        f"{_NIP} (seed 004 sec. 8.3)",
        "shift error of dense-rotation > 1e-2 on every draw",
    ),
    Row(
        "counter-examples",
        "invariance",
        "a dense rotation that is a one-parameter group is relative",
        f"{_NIP} (seed 004, orthogonal invariance)",
        "shift error of dense-group < 1e-4 on every draw",
    ),
    Row(
        "vision",
        "vision",
        "2-D axial RoPE beats learned absolute (interpolated) at 16x16",
        "RoPE-ViT (Heo et al. 2024), DeiT-S trained at 224, top-1 at 384: Axial 80.0 vs APE 79.4",
        "accuracy at 16x16, rope-axial vs learned, spreads apart",
    ),
    Row(
        "vision",
        "vision",
        "RoPE-Mixed beats learned absolute (interpolated) at 16x16",
        "RoPE-ViT, DeiT-S at 384: Mixed 81.8 vs APE 79.4",
        "accuracy at 16x16, rope-mixed vs learned, spreads apart",
    ),
    Row(
        "vision",
        "vision",
        "RoPE-Mixed beats 2-D axial RoPE at 16x16",
        "RoPE-ViT, DeiT-S at 384: Mixed 81.8 vs Axial 80.0",
        "accuracy at 16x16, rope-mixed vs rope-axial, spreads apart",
    ),
    Row(
        "vision",
        "vision",
        "2-D axial RoPE beats 1-D raster RoPE at 16x16",
        f"{_NIP} (papers.md E7 expects flattened 1-D positions to underperform)",
        "accuracy at 16x16, rope-axial vs rope-1d, spreads apart",
    ),
    Row(
        "vision",
        "vision",
        "2-D axial RoPE keeps more of its 8x8 accuracy at 16x16 than learned absolute",
        f"RoPE-ViT, DeiT-S top-1 at 384 / at 224: Axial {_r(80.0, 80.9)}, APE {_r(79.4, 80.4)}",
        "accuracy at 16x16 / at 8x8, rope-axial vs learned, spreads apart",
    ),
)
