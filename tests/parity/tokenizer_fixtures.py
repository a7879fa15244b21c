"""Hugging Face `tokenizers` reference ids for tests/unit/test_tokenizers.c.

Run by hand, after scripts/fetch-pretrained.sh (needs the `tokenizers`
package, e.g. python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers):
    /tmp/tokvenv/bin/python tests/parity/tokenizer_fixtures.py
It writes
  tests/parity/fixtures/tokenizers.txt.gz   expected ids (format below)
  tests/parity/fixtures/tiny_roberta/tokenizer.json
      a small byte-level BPE with RoBERTa's template and add_prefix_space,
      trained here on data/sst2_sample, to test tokenizer.json BPE files
      (merges as ["a", "b"] lists, as `tokenizers` writes them now), and
  tests/parity/fixtures/tiny_roberta_str/tokenizer.json, the same with merges
      as "a b" strings (the older layout of Hugging Face's hub files).
With --gpt2-json PATH it also writes GPT-2's tokenizer.json laid out as
Hugging Face's own (compact, merges as "a b" strings), for bench/json_parse.c.

Tokenizers: M = all-MiniLM-L6-v2 (WordPiece, its tokenizer.json), G = GPT-2
(byte-level BPE from encoder.json + vocab.bpe), R = tiny_roberta.
Texts: K = King James Bible lines (`bible -f gen1:1-rev22:21`, the verse
reference removed), S = sentences of data/sst2_sample/{train,dev,test}.tsv in
that order, X = the hand-written cases below and 400 seeded random strings
over many scripts (stored hex-encoded).
Line formats (one case per line, fields separated by spaces):
  TOK K INDEX ids...                 full ids (the first KJV_FULL lines)
  TOK K INDEX #HASH COUNT            FNV-1a 32-bit hash of the ids (little-endian
                                     int32 bytes) and their count, the other lines
  TOK S INDEX ids...
  TOK X HEXTEXT ids...
  TOK P I J MAXLEN ids... ; type_ids...   the pair (S[I], S[J]) truncated to MAXLEN
  TOK D S INDEX HEXTEXT             decode(encode(S[INDEX])), special tokens skipped
  TOK D X HEXINPUT HEXTEXT          the same for a hand-written case (M only:
                                    GPT-2's decoding gives back the text itself)
Ids include the special tokens ([CLS] A [SEP]; <s> A </s>; none for GPT-2);
no truncation or padding unless a MAXLEN is given.
"""
import gzip
import json
import os
import subprocess
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers, AddedToken

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "parity", "fixtures")
PRE = os.path.join(ROOT, "data", "pretrained")
KJV_FULL = 300

EXTRA = [
    "Héllo, Wörld! Ça va? naïve café résumé",
    "ÅNGSTRÖM İstanbul ǅemal ΣΊΣΥΦΟΣ straße",
    "中文字符和日本語のテキスト, 한국어",
    "don't I'll we've they're she'd it's 'quoted' DON'T",
    "  leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\n\n  mixed \t whitespace",
    "numbers 12345 3.14159 1,000,000 ½ ² ٣",
    "emoji 😀👍🏽 and symbols ©®™ → ≠ ∞",
    "[CLS] special [SEP] tokens [MASK] in text [UNK]",
    "<|endoftext|>GPT-2's end of text<|endoftext|> marker",
    "<s>roberta <mask> specials</s>",
    "control\x01chars\x7f and \u200bzero width\ufeff",
    "a" * 120 + " averyveryverylongwordthatwillnotbeinthevocabularyatall",
    "punctuation!!! ... ??? --- (brackets) [square] {curly} @user #tag $5 100%",
    "",
    " ",
]


def random_texts(count=400, seed=12):
    """Random strings over many scripts and classes (letters, marks, digits,
    punctuation, symbols, spaces, controls, CJK, emoji, astral planes), so the
    Unicode tables behind both tokenizers are compared widely."""
    import random
    rng = random.Random(seed)
    ranges = [(0x20, 0x7E), (0x09, 0x0D), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
              (0x590, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x1E00, 0x1EFF),
              (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x214F), (0x2190, 0x22FF), (0x3000, 0x30FF),
              (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xF900, 0xFAFF), (0xFE00, 0xFE6F),
              (0xFF00, 0xFFEF), (0x1D400, 0x1D7FF), (0x1F300, 0x1F6FF), (0x20000, 0x2A6DF), (0xE0000, 0xE007F)]
    out = []
    for _ in range(count):
        chars = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(ranges)
            cp = rng.randint(lo, hi)
            if 0xD800 <= cp <= 0xDFFF or cp == 0:
                cp = 0x20
            chars.append(chr(cp))
            if rng.random() < 0.2:
                chars.append(" ")
        out.append("".join(chars))
    return out


def kjv_lines():
    out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], check=True, capture_output=True).stdout
    return [line.split(" ", 1)[1] if " " in line else "" for line in out.decode("utf-8").split("\n") if line]


def sst2_sentences():
    out = []
    for split in ("train", "dev", "test"):
        with open(os.path.join(ROOT, "data", "sst2_sample", split + ".tsv"), encoding="utf-8") as f:
            rows = f.read().split("\n")
        col = rows[0].split("\t").index("sentence")
        out += [r.split("\t")[col] for r in rows[1:] if r]
    return out


def gpt2_tokenizer(json_path):
    d = os.path.join(PRE, "gpt2-bpe")
    tok = Tokenizer(models.BPE.from_file(os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=True)])
    # Hugging Face's own gpt2 tokenizer.json: compact, merges as "a b" strings,
    # empty prefix and suffix.
    if json_path:
        j = json.loads(tok.to_str())
        m = j["model"]
        m["continuing_subword_prefix"] = ""
        m["end_of_word_suffix"] = ""
        m.pop("ignore_merges", None)
        m["merges"] = [" ".join(p) if isinstance(p, list) else p for p in m["merges"]]
        with open(json_path, "w", encoding="utf-8") as f:
            f.write(json.dumps(j, ensure_ascii=False, separators=(",", ":")))
    return tok


def tiny_roberta(sentences):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=2,
                                  special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(sentences, trainer)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")))
    d = os.path.join(FIX, "tiny_roberta")
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    j = json.loads(tok.to_str())
    j["model"]["merges"] = [" ".join(p) if isinstance(p, list) else p for p in j["model"]["merges"]]
    d = os.path.join(FIX, "tiny_roberta_str")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(j, ensure_ascii=False, indent=1))
    return tok


def fnv(ids):
    h = 2166136261
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def main():
    minilm = Tokenizer.from_file(os.path.join(PRE, "all-MiniLM-L6-v2", "tokenizer.json"))
    sst2 = sst2_sentences()
    gpt2_json = sys.argv[sys.argv.index("--gpt2-json") + 1] if "--gpt2-json" in sys.argv else None
    toks = {"M": minilm, "G": gpt2_tokenizer(gpt2_json), "R": tiny_roberta(sst2)}
    for t in toks.values():
        t.no_truncation()
        t.no_padding()
    kjv = kjv_lines()
    lines = []
    for name, tok in toks.items():
        for i, enc in enumerate(tok.encode_batch(kjv) if name != "R" else []):
            ids = enc.ids
            if i < KJV_FULL:
                lines.append("%s K %d %s" % (name, i, " ".join(map(str, ids))))
            else:
                lines.append("%s K %d #%08x %d" % (name, i, fnv(ids), len(ids)))
        for i, enc in enumerate(tok.encode_batch(sst2)):
            lines.append("%s S %d %s" % (name, i, " ".join(map(str, enc.ids))))
        for text in EXTRA + random_texts():
            ids = tok.encode(text).ids
            lines.append("%s X %s %s" % (name, text.encode("utf-8").hex() or "-", " ".join(map(str, ids))))
        for (i, j, max_len) in [(0, 1, 8), (2, 3, 12), (4, 40, 16), (5, 6, 64), (7, 100, 11), (8, 9, 9)]:
            tok.enable_truncation(max_len, strategy="longest_first")
            enc = tok.encode(sst2[i], sst2[j])
            tok.no_truncation()
            lines.append("%s P %d %d %d %s ; %s" % (name, i, j, max_len, " ".join(map(str, enc.ids)),
                                                    " ".join(map(str, enc.type_ids))))
    m = toks["M"]
    for i, s in enumerate(sst2):
        lines.append("M D S %d %s" % (i, m.decode(m.encode(s).ids).encode("utf-8").hex() or "-"))
    for text in EXTRA + random_texts():
        lines.append("M D X %s %s" % (text.encode("utf-8").hex() or "-",
                                      m.decode(m.encode(text).ids).encode("utf-8").hex() or "-"))
    with gzip.GzipFile(os.path.join(FIX, "tokenizers.txt.gz"), "wb", mtime=0) as f:
        f.write(("\n".join(lines) + "\n").encode("utf-8"))
    print("wrote %d cases" % len(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
