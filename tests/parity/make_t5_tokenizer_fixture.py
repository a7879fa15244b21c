"""A T5-style SentencePiece Unigram tokenizer.json and Hugging Face's ids for
it, for tests/unit/test_tokenizers.c (test_t5_unigram).

Run by hand (never by the suite), with sentencepiece, protobuf, tokenizers and
transformers installed (the committed files: sentencepiece 0.2.3, tokenizers
0.23.3, transformers 5.24.0) and `bible` (Debian package bible-kjv) on the PATH:
    python3 tests/parity/make_t5_tokenizer_fixture.py
Training is single-threaded, so the files come out the same each run.
It writes
  tests/parity/fixtures/t5_unigram/tokenizer.json
      SentencePiece Unigram trained on the King James Bible with T5's settings
      (vocab 2000, pad 0, eos 1, unk 2, no bos, nmt_nfkc), converted by
      transformers' T5Tokenizer with 3 extra ids (<extra_id_2..0> = 2000..2002).
  tests/parity/fixtures/t5_unigram_bf/tokenizer.json
      a byte_fallback Unigram (vocab 800 with the 256 <0xNN> pieces, identity
      normalization), converted the way transformers converts a SentencePiece
      model without a tokenizer class (SpmConverter.build_tokenizer_from_spm_proto:
      Replace normalizers with regular expressions, Metaspace without split,
      decoder Replace + ByteFallback + Fuse + Strip), with T5's added tokens
      and "$A </s>" template added.
  tests/parity/fixtures/t5_unigram_cases.txt.gz   texts and expected ids.

The character map. T5's nmt_nfkc map is 240 KB (320 KB of base64), too big for
the repository. Hugging Face's Precompiled normalizer looks up a grapheme
cluster whole only when it is shorter than 6 bytes, else each character
(at most 4 bytes), and takes the shortest key that is a prefix of what it
looks up; so keys longer than 5 bytes (decomposed Hangul, long sequences) can
never match. The model here is trained with nmt_nfkc's rules for keys of at
most 5 bytes (7750 rules; SentencePiece builds the same double-array trie
format from them): Hugging Face normalizes every text exactly as with the full
nmt_nfkc map, which the script checks on every text of the fixture and on
every code point, and the trained pieces are the same as with nmt_nfkc.

Variants: one file gives several tokenizers by textual edits of its JSON
(the C test applies the same edits), as transformers' converters write T5:
  T  the file (transformers 5: Precompiled; WhitespaceSplit + Metaspace)
  L  T5Converter / SpmConverter with legacy=True (transformers 4): Precompiled,
     Strip right, Replace " {2,}" by "▁"; Metaspace prepend_scheme "always"
  F  the same with legacy=False: Metaspace prepend_scheme "first"
  H  the layout of the Hugging Face hub's t5-small file: Precompiled then
     Replace " {2,}" by " "; WhitespaceSplit + Metaspace with the older
     add_prefix_space key
  B  the byte_fallback file (legacy=True: prepend "always", "\\A▁" doubled)
  G  the byte_fallback file with legacy=False (prepend "first")

Fixture lines (fields separated by one space; texts hex-encoded UTF-8, "-" empty):
  X HEX                        text number k (numbered from 0 in file order)
  F V PATH                     variant V starts from PATH (under tests/parity/fixtures)
  E V HEXFROM HEXTO            then replaces the one occurrence of FROM by TO
  I V K ids...                 ids of text K with special tokens
  N V K ids...                 ids of text K without special tokens
  D V K HEX                    decode(ids of I), special tokens skipped
  S V K HEX                    decode(ids of I) keeping special tokens
  P V I J MAXLEN ids... ; type_ids...   the pair (I, J) truncated longest first
"""
import base64
import gzip
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb
from tokenizers import AddedToken, Tokenizer, normalizers, processors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "parity", "fixtures")
MAX_QUERY = 5   # the longest string Hugging Face's Precompiled looks up

HAND = [
    "", " ", "   ", "\t\n", "a", "Hello world", "Hello   world  ", "  leading and trailing  ",
    "tabs\tand\nnewlines\r\nand\u00a0no-break\u2009thin\u3000ideographic spaces",
    "zero\u200bwidth\u200dand\ufeffBOM and soft\u00adhyphen",
    "control\x01chars\x7f\x1b[0m and \x85 NEL",
    "Héllo, Wörld! Ça va? naïve café résumé",
    "decomposed: e\u0301 a\u0308 n\u0303 A\u030a; composed: é ä ñ Å",
    "full-width: Ｈｅｌｌｏ，　ＷＯＲＬＤ！ １２３ ａｂｃ",
    "half-width katakana: ｶﾀｶﾅ ﾊﾟﾋﾟ and ｰ",
    "ligatures ﬁ ﬂ ﬀ ﬃ Ĳ ǉ ǅ and ſt",
    "superscripts x² y³ n⁰ H₂O and ½ ¼ ¾ ⅓ ⅞",
    "circled ① ② ⑩ ⓐ Ⓐ roman Ⅻ ⅳ and № ™ ℡ ㎏ ㍿",
    "Ａ\u0301 Ａ\u0301\u0301 ǉ\u0301 (clusters: the accent goes with the cluster)",
    "numbers 12345 3.14159 1,000,000 2024-01-31 0x1F 007",
    "digits in scripts: ٣٤٥ ३४५ ๓๔๕ ３４５",
    "ÅNGSTRÖM İstanbul ǅemal ΣΊΣΥΦΟΣ straße ΜΆΪΟΣ",
    "中文字符和日本語のテキスト, 한국어 ㄱㄴ \u1100\u1161\u11a8",
    "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷🇩🇪 and symbols ©®™ → ≠ ∞",
    "Ǆ ǆ Ǳ ǳ and ŉ ẞ",
    "quotes “double” ‘single’ «guillemets» „low“ and dashes – — ‐",
    "ellipsis… and ‥ and ‼ ⁇ ⁈",
    "<extra_id_0> sentinel <extra_id_1>word<extra_id_2>",
    "</s> end marker </s></s> and <pad> <unk> in text",
    "<extra_id_0>",
    "a▁b ▁▁ literal metaspace ▁",
    "unknown: ☃ ☃☃ ⌘ ✓✓✓ ∀∃ and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "x" * 120 + " averyveryverylongwordthatwillnotbeinthevocabularyatall",
    "And God said, Let there be light: and there was light.",
    "IN THE BEGINNING GOD CREATED THE HEAVEN AND THE EARTH.",
    "in the beginning god created the heaven and the earth.",
    "Jesus wept.",
    "punctuation!!! ... ??? --- (brackets) [square] {curly} @user #tag $5 100% a/b\\c",
    "tab\tseparated\tvalues\tand  double  spaces",
    " \u3000 only odd spaces \u2002\u2003 ",
    "ÿ\u0308 ç\u0327 ō\u0304 (doubled marks)",
    "ﾞ ﾟ ゛゜ (sound marks) がぱ か\u3099 は\u309a",
    "Ω Ω K Å (compatibility letters) ℃ ℉",
    "I'll, don't, we're, it's",
    "\u202edirection\u202c marks \u200e\u200f",
    "Thou shalt not kill.\nThou shalt not steal.",
    "\x01\x02starts with control characters",
    "\u3000\u3000starts with ideographic spaces",
    "▁starts with a metaspace",
    " <extra_id_1> starts with a space and a sentinel",
    "\u200b\u200bstarts with zero-width spaces",
]


def kjv_lines():
    out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], check=True, capture_output=True).stdout
    return [line.split(" ", 1)[1] if " " in line else "" for line in out.decode("utf-8").split("\n") if line]


def random_texts(count=150, seed=5):
    """Random strings over many scripts, with combining marks and odd spaces,
    so the character map and the grapheme clusters are compared widely."""
    rng = random.Random(seed)
    ranges = [(0x20, 0x7E), (0x20, 0x7E), (0x09, 0x0D), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF),
              (0x400, 0x4FF), (0x590, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF),
              (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x2070, 0x218F), (0x2460, 0x24FF), (0x3000, 0x30FF),
              (0x3200, 0x33FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFB00, 0xFB4F),
              (0xFE00, 0xFE6F), (0xFF00, 0xFFEF), (0x1D400, 0x1D7FF), (0x1F300, 0x1F6FF), (0x1F1E6, 0x1F1FF)]
    out = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randint(1, 24)):
            lo, hi = rng.choice(ranges)
            chars.append(chr(rng.randint(lo, hi)))
            if rng.random() < 0.2:
                chars.append(" " * rng.randint(1, 3))
        out.append("".join(chars))
    return out


# ---- the character map ----

def charsmap_rules(blob):
    """(key, value) byte strings of a precompiled map: a DFS over its trie."""
    trie = struct.unpack("<I", blob[:4])[0]
    units = struct.unpack("<%dI" % (trie // 4), blob[4:4 + trie])
    norm = blob[4 + trie:]
    offset = lambda u: (u >> 10) << ((u & (1 << 9)) >> 6)
    out = []

    def dfs(pos, key):
        for b in range(1, 256):
            c = pos ^ b
            if c < len(units) and (units[c] & 0x800000FF) == b:
                nxt = c ^ offset(units[c])
                if (units[c] >> 8) & 1:
                    v = units[nxt] & 0x7FFFFFFF
                    out.append((key + bytes([b]), norm[v:norm.index(b"\0", v)]))
                dfs(nxt, key + bytes([b]))

    dfs(offset(units[0]), b"")
    return out


def train(work, name, **kw):
    args = dict(input=os.path.join(work, "kjv.txt"), model_prefix=os.path.join(work, name), model_type="unigram",
                pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2, num_threads=1)
    args.update(kw)
    spm.SentencePieceTrainer.train(**args)
    m = pb.ModelProto()
    with open(os.path.join(work, name + ".model"), "rb") as f:
        m.ParseFromString(f.read())
    return m


def t5_model(work):
    """nmt_nfkc, then the same training with its rules of at most 5 bytes."""
    full = train(work, "full", vocab_size=2000, normalization_rule_name="nmt_nfkc")
    rules = [(k, v) for k, v in charsmap_rules(full.normalizer_spec.precompiled_charsmap) if len(k) <= MAX_QUERY]
    tsv = os.path.join(work, "rules.tsv")
    with open(tsv, "w", encoding="utf-8") as f:
        for k, v in rules:
            f.write(" ".join("%X" % ord(c) for c in k.decode()) + "\t" +
                    " ".join("%X" % ord(c) for c in v.decode()) + "\n")
    small = train(work, "spiece", vocab_size=2000, normalization_rule_tsv=tsv)
    assert sorted(charsmap_rules(small.normalizer_spec.precompiled_charsmap)) == sorted(rules)
    assert [(p.piece, p.type) for p in small.pieces] == [(p.piece, p.type) for p in full.pieces]
    return full, small


def check_same_normalization(full, small, texts):
    a = normalizers.Precompiled(full.normalizer_spec.precompiled_charsmap)
    b = normalizers.Precompiled(small.normalizer_spec.precompiled_charsmap)
    every = [chr(c) for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    for t in texts + every + [chr(c) + "\u0301" for c in range(0x20, 0x3000)]:
        assert a.normalize_str(t) == b.normalize_str(t), repr(t)


# ---- tokenizer.json files ----

def compact(j):
    return json.dumps(j, ensure_ascii=False, separators=(",", ":"))


def t5_json(work, model):
    from transformers import T5Tokenizer
    d = os.path.join(work, "t5dir")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "spiece.model"), "wb") as f:
        f.write(model.SerializeToString())
    tok = T5Tokenizer.from_pretrained(d, extra_ids=3)
    out = os.path.join(work, "t5out")
    tok.save_pretrained(out)
    with open(os.path.join(out, "tokenizer.json"), encoding="utf-8") as f:
        return json.load(f), os.path.join(d, "spiece.model")


class _Slow:
    """What T5Converter reads from a slow T5 tokenizer."""

    def __init__(self, vocab_file, legacy):
        self.vocab_file, self.legacy, self._extra_ids = vocab_file, legacy, 3

    def convert_tokens_to_ids(self, tok):
        return 1


def converter_blocks(spiece, legacy):
    from transformers.convert_slow_tokenizer import T5Converter
    j = json.loads(T5Converter(_Slow(spiece, legacy)).converted().to_str())
    return j["normalizer"], j["pre_tokenizer"], j["decoder"]


def bf_json(work):
    from transformers.convert_slow_tokenizer import SpmConverter
    m = train(work, "bf", vocab_size=800, byte_fallback=True, normalization_rule_name="identity")
    vocab = [(p.piece, p.score) for p in m.pieces]
    tok = SpmConverter.build_tokenizer_from_spm_proto(m, vocab, legacy=True)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ("<pad>", "</s>", "<unk>")])
    tok.post_processor = processors.TemplateProcessing(single=["$A", "</s>"], pair=["$A", "</s>", "$B", "</s>"],
                                                       special_tokens=[("</s>", 1)])
    legacy_false = json.loads(SpmConverter.build_tokenizer_from_spm_proto(m, vocab, legacy=False).to_str())
    return json.loads(tok.to_str()), legacy_false


def block_edit(text, key, old, new):
    """The edit that replaces one top-level block (not the normalizer's map)."""
    a, b = '"%s":%s' % (key, compact(old)), '"%s":%s' % (key, compact(new))
    assert text.count(a) == 1, key
    return a, b


def normalizer_edits(text, base, new):
    """Edits turning base's normalizer into new's, keeping the long map
    string out of them: both must hold the same Precompiled block."""
    def parts(nz):
        items = nz["normalizers"] if nz["type"] == "Sequence" else [nz]
        k = next(i for i, x in enumerate(items) if x["type"] == "Precompiled")
        return nz["type"] == "Sequence", items[:k], items[k + 1:]
    pre = '"normalizer":'
    cm = compact(base if base["type"] == "Precompiled" else
                 next(x for x in base["normalizers"] if x["type"] == "Precompiled"))
    head = lambda seq, before: pre + ('{"type":"Sequence","normalizers":[' if seq else "") + \
        "".join(compact(x) + "," for x in before)
    tail = lambda seq, after: "".join("," + compact(x) for x in after) + ("]}" if seq else "") + ',"pre_tokenizer":'
    (bs, bb, ba), (ns, nb, na) = parts(base), parts(new)
    assert compact(new if new["type"] == "Precompiled" else
                   next(x for x in new["normalizers"] if x["type"] == "Precompiled")) == cm
    ca, cb = head(bs, bb) + cm[:40], tail(bs, ba)
    assert text.count(ca) == 1 and text.count(cm + cb) == 1
    return [(ca, head(ns, nb) + cm[:40]), (cm[-40:] + cb, cm[-40:] + tail(ns, na))]


def apply(text, edits):
    for a, b in edits:
        assert text.count(a) == 1, a[:80]
        text = text.replace(a, b)
    return text


# ---- the cases ----

def hexs(s):
    return s.encode("utf-8").hex() or "-"


def cases(letter, tok, texts, lines, full_ids, every):
    """every: all texts; else (a variant) 30 verses, the hand-written cases
    and 30 random strings."""
    tok.no_truncation()
    tok.no_padding()
    hand = range(full_ids, full_ids + len(HAND))
    for k, enc in enumerate(tok.encode_batch(texts)):
        if not every and not (k < 30 or k in hand or hand.stop <= k < hand.stop + 30):
            continue
        lines.append("I %s %d %s" % (letter, k, " ".join(map(str, enc.ids))))
        lines.append("D %s %d %s" % (letter, k, hexs(tok.decode(enc.ids, skip_special_tokens=True))))
        if k in hand or k % 7 == 0:
            lines.append("S %s %d %s" % (letter, k, hexs(tok.decode(enc.ids, skip_special_tokens=False))))
            enc = tok.encode(texts[k], add_special_tokens=False)
            lines.append("N %s %d %s" % (letter, k, " ".join(map(str, enc.ids))))
    for (i, j, max_len) in [(full_ids, full_ids + 1, 8), (2, 3, 12), (5, 40, 16), (6, 7, 64), (50, 9, 11),
                            (12, 130, 20), (full_ids + 5, full_ids + 13, 9)]:
        tok.enable_truncation(max_len, strategy="longest_first")
        enc = tok.encode(texts[i], texts[j])
        tok.no_truncation()
        lines.append("P %s %d %d %d %s ; %s" % (letter, i, j, max_len, " ".join(map(str, enc.ids)),
                                                " ".join(map(str, enc.type_ids))))
    for max_len in (2, 5):
        tok.enable_truncation(max_len)
        enc = tok.encode(texts[2])
        tok.no_truncation()
        lines.append("P %s %d -1 %d %s ; %s" % (letter, 2, max_len, " ".join(map(str, enc.ids)),
                                                " ".join(map(str, enc.type_ids))))


def main():
    work = tempfile.mkdtemp(prefix="t5fix")
    kjv = kjv_lines()
    with open(os.path.join(work, "kjv.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(kjv) + "\n")
    texts = kjv[::260] + HAND + random_texts()
    full, small = t5_model(work)
    check_same_normalization(full, small, texts)

    t5, spiece = t5_json(work, small)
    t5_text = compact(t5)
    bf, bf_first = bf_json(work)
    bf_text = compact(bf)
    for sub, text in (("t5_unigram", t5_text), ("t5_unigram_bf", bf_text)):
        os.makedirs(os.path.join(FIX, sub), exist_ok=True)
        with open(os.path.join(FIX, sub, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text)

    variants = {"T": ("t5_unigram/tokenizer.json", t5_text, [])}
    for letter, legacy in (("L", True), ("F", False)):
        nz, pt, dec = converter_blocks(spiece, legacy)
        edits = normalizer_edits(t5_text, t5["normalizer"], nz)
        edits += [block_edit(t5_text, "pre_tokenizer", t5["pre_tokenizer"], pt),
                  block_edit(t5_text, "decoder", t5["decoder"], dec)]
        variants[letter] = ("t5_unigram/tokenizer.json", t5_text, edits)
    hub_nz = {"type": "Sequence", "normalizers": [t5["normalizer"], {"type": "Replace", "pattern": {"Regex": " {2,}"},
                                                                     "content": " "}]}
    hub_ms = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}
    variants["H"] = ("t5_unigram/tokenizer.json", t5_text,
                     normalizer_edits(t5_text, t5["normalizer"], hub_nz) +
                     [block_edit(t5_text, "pre_tokenizer", t5["pre_tokenizer"],
                                 {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, hub_ms]}),
                      block_edit(t5_text, "decoder", t5["decoder"], hub_ms)])
    variants["B"] = ("t5_unigram_bf/tokenizer.json", bf_text, [])
    variants["G"] = ("t5_unigram_bf/tokenizer.json", bf_text,
                     [block_edit(bf_text, k, bf[k], bf_first[k]) for k in ("normalizer", "pre_tokenizer")
                      if bf[k] != bf_first[k]])

    lines = ["# written by tests/parity/make_t5_tokenizer_fixture.py (format: its docstring)"]
    lines += ["X " + hexs(t) for t in texts]
    for letter, (path, text, edits) in variants.items():
        lines.append("F %s %s" % (letter, path))
        lines += ["E %s %s %s" % (letter, hexs(a), hexs(b)) for a, b in edits]
        tok = Tokenizer.from_str(apply(text, edits))
        cases(letter, tok, texts, lines, len(kjv[::260]), letter in "TB")
    with gzip.GzipFile(os.path.join(FIX, "t5_unigram_cases.txt.gz"), "wb", mtime=0) as f:
        f.write(("\n".join(lines) + "\n").encode("utf-8"))
    print("wrote %d lines, %d texts, variants %s" % (len(lines), len(texts), "".join(variants)), file=sys.stderr)


if __name__ == "__main__":
    main()
