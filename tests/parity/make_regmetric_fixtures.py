"""Reference regression scores for tests/unit/test_classmetrics.c.

Run by hand from the repository root (a venv with scipy and numpy):
    python -m venv /tmp/skvenv && /tmp/skvenv/bin/pip install scipy numpy
    /tmp/skvenv/bin/python tests/parity/make_regmetric_fixtures.py
It writes tests/parity/fixtures/regmetrics.tsv.

Cases: predictions and labels drawn at random (numpy's default_rng(11)) at
several sizes and correlations, scores rounded to steps as STS-B's labels
are (ties), then edge cases: two examples, a perfect and a reversed order,
every label tied but one, many ties on both sides, a large offset.

Format: one case a line, fields separated by tabs; lines starting with '#'
are comments.
  n <TAB> predictions (space-separated) <TAB> labels <TAB> pearson <TAB>
  spearmanr
pearson is scipy.stats.pearsonr's statistic, spearmanr scipy.stats.spearmanr's
(average ranks for ties), the numbers the GLUE STS-B metric reports; values
are Python's repr, so they read back exactly.
"""
import os

import numpy as np
from scipy.stats import pearsonr, spearmanr

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "parity", "fixtures", "regmetrics.tsv")


def case(p, y):
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return "\t".join([str(len(p)), " ".join(repr(float(v)) for v in p), " ".join(repr(float(v)) for v in y),
                      repr(float(pearsonr(p, y)[0])), repr(float(spearmanr(p, y)[0]))])


def main():
    rng = np.random.default_rng(11)
    lines = ["# n\tpredictions\tlabels\tpearson\tspearmanr (scipy; tests/parity/make_regmetric_fixtures.py)"]
    for n in (3, 10, 60, 200):
        for noise in (0.1, 1.0, 5.0):
            y = rng.uniform(0, 5, n)
            p = y + rng.normal(0, noise, n)
            lines.append(case(p, y))
            lines.append(case(np.round(p * 2) / 2, np.round(y * 5) / 5))  # ties on both sides
    lines.append(case([0.5, 1.5], [3.0, 1.0]))                       # two examples
    lines.append(case([1, 2, 3, 4, 5], [2, 4, 6, 8, 10]))            # the same order
    lines.append(case([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]))             # reversed
    lines.append(case([0.3, 0.1, 0.7, 0.2], [1, 1, 1, 4]))           # every label tied but one
    lines.append(case([1, 1, 2, 2, 2, 3], [0, 1, 1, 1, 2, 2]))       # ties everywhere
    lines.append(case(1e6 + rng.normal(0, 1, 50), rng.normal(0, 1, 50)))  # a large offset
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {OUT}: {len(lines) - 1} cases")


if __name__ == "__main__":
    main()
