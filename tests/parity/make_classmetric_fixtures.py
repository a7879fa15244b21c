"""Reference classification scores for tests/unit/test_classmetrics.c.

Run by hand from the repository root (a venv with scikit-learn and numpy):
    python -m venv /tmp/skvenv && /tmp/skvenv/bin/pip install scikit-learn numpy
    /tmp/skvenv/bin/python tests/parity/make_classmetric_fixtures.py
It writes tests/parity/fixtures/classmetrics.tsv.

Cases: labels and predictions drawn at random (numpy's default_rng(7)) for
2, 3, 5 and 10 classes at several sizes and accuracies, then edge cases: one
class never predicted, a class that is neither a label nor a prediction,
every prediction right, every prediction wrong, every label one class,
every prediction one class, a single example.

Format: one case a line, fields separated by tabs; lines starting with '#'
are comments.
  C <TAB> the C x C confusion counts, row-major (row: label, column:
  prediction), separated by spaces <TAB> precision <TAB> recall <TAB> f1
  <TAB> f1_macro <TAB> f1_weighted <TAB> matthews_correlation
precision, recall and f1 are scikit-learn's average='binary' (pos_label 1)
for two classes and "-" otherwise; f1_macro and f1_weighted are f1_score's
average='macro' / 'weighted' over the classes present (labels=None);
everything with zero_division=0. Floats are Python's repr.
"""
import os

import numpy as np
from sklearn.metrics import confusion_matrix, f1_score, matthews_corrcoef, precision_score, recall_score

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "parity", "fixtures", "classmetrics.tsv")


def case(C, y, p):
    y, p = np.asarray(y), np.asarray(p)
    cm = confusion_matrix(y, p, labels=list(range(C)))
    row = [str(C), " ".join(str(int(v)) for v in cm.ravel())]
    if C == 2:
        row += [repr(float(precision_score(y, p, average="binary", zero_division=0))),
                repr(float(recall_score(y, p, average="binary", zero_division=0))),
                repr(float(f1_score(y, p, average="binary", zero_division=0)))]
    else:
        row += ["-", "-", "-"]
    row += [repr(float(f1_score(y, p, average="macro", zero_division=0))),
            repr(float(f1_score(y, p, average="weighted", zero_division=0))),
            repr(float(matthews_corrcoef(y, p)))]
    return "\t".join(row)


def main():
    rng = np.random.default_rng(7)
    lines = ["# C\tconfusion (row: label, column: prediction)\tprecision\trecall\tf1\tf1_macro\tf1_weighted\t"
             "matthews_correlation (scikit-learn; tests/parity/make_classmetric_fixtures.py)"]
    for C in (2, 3, 5, 10):
        for n in (7, 60, 500):
            for right in (0.3, 0.7, 0.95):
                y = rng.integers(0, C, n)
                p = np.where(rng.random(n) < right, y, rng.integers(0, C, n))
                lines.append(case(C, y, p))
    # edge cases
    lines.append(case(2, [0, 1, 1, 0, 1], [0, 0, 0, 0, 0]))          # the positive class never predicted
    lines.append(case(2, [0, 0, 0, 0], [0, 1, 0, 0]))                # the positive class never a label
    lines.append(case(2, [0, 0, 0], [0, 0, 0]))                      # only class 0, all right
    lines.append(case(2, [1, 0, 1, 1], [1, 0, 1, 1]))                # all right
    lines.append(case(2, [1, 0, 1, 0], [0, 1, 0, 1]))                # all wrong
    lines.append(case(2, [1], [1]))                                  # one example
    lines.append(case(3, [0, 0, 1, 1, 0], [0, 1, 1, 1, 0]))          # class 2 absent everywhere
    lines.append(case(3, [0, 1, 2, 0, 1, 2], [1, 1, 1, 1, 1, 1]))    # every prediction one class
    lines.append(case(4, [2, 2, 2, 2], [2, 0, 3, 2]))                # every label one class
    lines.append(case(5, [0, 1, 2, 3, 4], [1, 2, 3, 4, 0]))          # all wrong, five classes
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {OUT}: {len(lines) - 1} cases")


if __name__ == "__main__":
    main()
