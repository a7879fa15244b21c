"""Reference multi-label classification scores for tests/unit/test_classmetrics.c.

Run by hand from the repository root (a venv with scikit-learn and numpy):
    python -m venv /tmp/skvenv && /tmp/skvenv/bin/pip install scikit-learn numpy
    /tmp/skvenv/bin/python tests/parity/make_multilabel_metric_fixtures.py
It writes tests/parity/fixtures/multilabel_metrics.tsv.

Cases: label sets and predicted sets drawn at random (numpy's
default_rng(13)) for 2, 3, 6 and 28 labels (GoEmotions has 28) at several
sizes (up to 200 examples, 40 of 28 labels), label densities and accuracies, then edge cases: a label that is
neither true nor predicted anywhere, nothing predicted, every prediction
right, every label set empty, a single example.

Format: one case a line, fields separated by tabs; lines starting with '#'
are comments.
  K <TAB> n <TAB> labels (n rows of K 0/1 digits, rows separated by spaces)
  <TAB> predictions (the same) <TAB> accuracy <TAB> precision <TAB> recall
  <TAB> f1 <TAB> f1_macro <TAB> f1_weighted
accuracy is scikit-learn's accuracy_score on the indicator arrays (every
label of an example right), precision, recall and f1 are average='micro',
f1_macro and f1_weighted average='macro' / 'weighted' (all K labels),
everything with zero_division=0. Floats are Python's repr.
"""
import os

import numpy as np
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "parity", "fixtures", "multilabel_metrics.tsv")


def rows(m):
    return " ".join("".join(str(int(v)) for v in r) for r in m)


def case(y, p):
    y, p = np.asarray(y, dtype=int), np.asarray(p, dtype=int)
    n, K = y.shape
    vals = [accuracy_score(y, p),
            precision_score(y, p, average="micro", zero_division=0),
            recall_score(y, p, average="micro", zero_division=0),
            f1_score(y, p, average="micro", zero_division=0),
            f1_score(y, p, average="macro", zero_division=0),
            f1_score(y, p, average="weighted", zero_division=0)]
    return "\t".join([str(K), str(n), rows(y), rows(p)] + [repr(float(v)) for v in vals])


def main():
    rng = np.random.default_rng(13)
    lines = ["# K\tn\tlabels\tpredictions\taccuracy\tprecision\trecall\tf1 (micro)\tf1_macro\tf1_weighted "
             "(scikit-learn; tests/parity/make_multilabel_metric_fixtures.py)"]
    for K in (2, 3, 6, 28):
        for n in ((5, 40, 200) if K < 28 else (5, 40)):
            for density, right in ((0.3, 0.7), (0.15, 0.9), (0.5, 0.5)):
                y = (rng.random((n, K)) < density).astype(int)
                flip = rng.random((n, K)) >= right
                p = np.where(flip, 1 - y, y)
                lines.append(case(y, p))
    # edge cases
    lines.append(case([[1, 0, 0], [0, 1, 0], [1, 1, 0]], [[1, 0, 0], [0, 0, 0], [1, 1, 0]]))  # label 2 nowhere
    lines.append(case([[1, 0], [0, 1], [1, 1]], [[0, 0], [0, 0], [0, 0]]))                    # nothing predicted
    lines.append(case([[1, 0, 1], [0, 1, 0]], [[1, 0, 1], [0, 1, 0]]))                        # all right
    lines.append(case([[0, 0, 0], [0, 0, 0]], [[0, 1, 0], [0, 0, 0]]))                        # no labels at all
    lines.append(case([[0, 1, 1, 0]], [[1, 1, 0, 0]]))                                        # one example
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines) - 1} cases to {OUT}")


if __name__ == "__main__":
    main()
