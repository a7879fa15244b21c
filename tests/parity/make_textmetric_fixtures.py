"""Reference BLEU and ROUGE-L values for tests/unit/test_textmetrics.c.

Run by hand from the repository root (the venv has sacrebleu 2.x and rouge_score;
the texts come from Debian's bible-kjv-text package, `apt-get install bible-kjv-text`):
    /work/venv/bin/python tests/parity/make_textmetric_fixtures.py
It writes tests/parity/fixtures/textmetrics.tsv.

Pairs: verses of the King James Bible (`bible -f gen1:1-rev22:21`, the verse
reference removed) as references, each hypothesis a deterministic perturbation
of its verse (word drops, swaps, lowercasing, punctuation changes, quotes and
&quot;, &amp;, numbers such as 3.14 and 1,000, hyphens and "-\\n", <skipped>,
truncation, added words, odd whitespace), then hand-written pairs: an empty
hypothesis, an empty reference, non-ASCII text (accents, curly quotes, NBSP,
U+0130 and the Kelvin sign, whose lowercase is ASCII), and 13a's edge cases.

Format: UTF-8 text, one record per line, fields separated by tabs. Lines that
start with '#' are comments. In text fields a backslash, tab, newline and
carriage return are written \\\\, \\t, \\n and \\r (nothing else is escaped).
  P <TAB> hyp <TAB> ref <TAB> rougeL_f1 <TAB> sys_len ref_len c1 c2 c3 c4 t1 t2 t3 t4
      one pair: rouge_score's rougeL F1 (RougeScorer(['rougeL'], use_stemmer=False)
      .score(ref, hyp)), and sacrebleu's statistics of the pair alone
      (corpus_bleu([hyp], [[ref]]): lengths, matches and totals of orders 1..4)
  C <TAB> which <TAB> score <TAB> p1 p2 p3 p4 <TAB> bp <TAB> sys_len <TAB> ref_len
      after the pairs: sacrebleu corpus_bleu(hyps, [refs]) with its defaults over
      every pair (which = "all") and over the pairs whose hypothesis has fewer
      13a tokens than its reference (which = "short": a brevity penalty below 1)
Floats are Python's repr (the shortest text that reads back as the same double).
"""
import os
import subprocess

import sacrebleu
from rouge_score import rouge_scorer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "parity", "fixtures", "textmetrics.tsv")
N_VERSES = 48
MAX_VERSE_CHARS = 150


def kjv_verses():
    out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], capture_output=True, text=True,
                         check=True).stdout
    verses = []
    for line in out.split("\n"):
        if line:
            verses.append(line.split(" ", 1)[1] if " " in line else "")
    return verses


def pick(verses):
    """N_VERSES short verses spread over the whole book, in a fixed order."""
    chosen, k = [], 0
    while len(chosen) < N_VERSES:
        v = verses[(k * 7919 + 101) % len(verses)]
        k += 1
        if 20 <= len(v) <= MAX_VERSE_CHARS and v not in chosen:
            chosen.append(v)
    return chosen


# ---- perturbations: each takes a verse and returns the hypothesis ----
def same(v):
    return v


def drop_every_third(v):
    w = v.split(" ")
    return " ".join(x for i, x in enumerate(w) if i % 3 != 2)


def swap_pairs(v):
    w = v.split(" ")
    for i in range(1, len(w) - 1, 4):
        w[i], w[i + 1] = w[i + 1], w[i]
    return " ".join(w)


def lowercase(v):
    return v.lower()


def punctuation(v):
    return v.replace(",", "").replace(";", ".").replace(":", " -").rstrip(".") + "!"


def quotes(v):
    w = v.split(" ")
    mid = len(w) // 2
    return " ".join(w[:mid]) + ' "' + " ".join(w[mid:mid + 3]) + '" &quot;' + " ".join(w[mid + 3:]) + "&quot;"


def ampersand(v):
    return v.replace(" and ", " &amp; ").replace(" the ", " &lt;the&gt; ", 1)


def numbers(v):
    return v.rstrip(".") + ", about 3.14 cubits and 1,000 men (2-3 days) at 5.5."


def hyphens(v):
    w = v.split(" ")
    if len(w) > 4:
        w[1] = w[1] + "-" + w[2]
        del w[2]
        w[3] = w[3][:2] + "-\n" + w[3][2:]
    return " ".join(w)


def truncate(v):
    w = v.split(" ")
    return " ".join(w[:max(1, len(w) // 2)])


def add_words(v):
    return "Verily, verily, I say unto you: " + v + " Selah."


def skipped(v):
    w = v.split(" ")
    return " ".join(w[:2] + ["<skipped>"] + w[2:]) + " <skipped>"


def odd_space(v):
    return "  " + v.replace(" ", "\t", 2).replace(" ", "\u00a0", 1) + " \n "


def reverse(v):
    return " ".join(reversed(v.split(" ")))


def upper_words(v):
    return " ".join(x.upper() if i % 2 else x for i, x in enumerate(v.split(" ")))


def dots(v):
    return v.replace(". ", ".. ").replace(", ", " , ") + "..."


PERTURB = [same, drop_every_third, swap_pairs, lowercase, punctuation, quotes, ampersand, numbers,
           hyphens, truncate, add_words, skipped, odd_space, reverse, upper_words, dots]

HAND = [
    ("", "In the beginning God created the heaven and the earth."),
    ("And God said, Let there be light.", ""),
    ("Jérusalem — the “holy” city; İsaac saw 3.5\u00a0\u212a at the café… naïve", "Jérusalem - the \"holy\" city; Isaac saw 3.5 K at the cafe... naive"),
    ("Ὁ λόγος σὰρξ ἐγένετο — 中文 «quoted» ½ ² ٣", "Ὁ λόγος σὰρξ ἐγένετο, 中文 \"quoted\" 1/2 2 3"),
    (".5 ., a.,b 1.2.3 x-1 -5 2--3 a--b 1,000,000 3.14.", ".5 ., a., b 1.2.3 x - 1 -5 2 - - 3 a--b 1,000,000 3.14 ."),
    ("path\\to\\file {a|b} [c_d] ~e^ `f` @g #h $i %j +k =l ?m /n *o", "path\\to\\file {a|b} [c_d] ~e^ `f` @g #h $i %j +k =l ?m /n *o"),
    ("&amp;lt; &amp;amp; &quot&quot; <skip<skipped>ped> -\n-\n", "&lt; &amp; \"&quot; <skipped> "),
    ("the the the the the the the", "the cat is on the mat the"),
    ("It's DON'T can't o'clock", "it's don't can't o'clock"),
    ("line one\nline two\r\nline\tthree", "line one line two line three"),
    ("the end .", "the end."),
    ("a\u0085b\u2028c\x1cd\u3000e\u200bf\x0bg", "a b c d e\u200bf g"),
    ("  ", "   "),
]


def escape(s):
    return s.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def main():
    verses = pick(kjv_verses())
    pairs = [(PERTURB[i % len(PERTURB)](v), v) for i, v in enumerate(verses)] + HAND
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    bleu = sacrebleu.metrics.BLEU()   # corpus BLEU's defaults: 13a, exp smoothing, case-sensitive
    lines = [("# " + l).rstrip() for l in __doc__.strip().split("\n")]
    short = []
    for hyp, ref in pairs:
        s = bleu.corpus_score([hyp], [[ref]])
        stats = [s.sys_len, s.ref_len] + list(s.counts) + list(s.totals)
        f1 = scorer.score(ref, hyp)["rougeL"].fmeasure
        lines.append("\t".join(["P", escape(hyp), escape(ref), repr(float(f1)), " ".join(map(str, stats))]))
        if s.sys_len < s.ref_len:
            short.append((hyp, ref))
    for which, subset in (("all", pairs), ("short", short)):
        c = sacrebleu.corpus_bleu([h for h, _ in subset], [[r for _, r in subset]])
        lines.append("\t".join(["C", which, repr(float(c.score)), " ".join(repr(float(p)) for p in c.precisions),
                                repr(float(c.bp)), str(c.sys_len), str(c.ref_len)]))
        print("%s: %d pairs, BLEU %.4f, bp %.4f" % (which, len(subset), c.score, c.bp))
    lines.insert(len(__doc__.strip().split("\n")),
                 "# sacrebleu %s, signature %s" % (sacrebleu.__version__, bleu.get_signature()))
    with open(OUT, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote %s" % OUT)


if __name__ == "__main__":
    main()
