#!/usr/bin/env bash
# Regenerates the committed seed corpora of the fuzz targets: the binary
# ones with tests/fuzz/make_seeds.c (built against the fuzz build of the
# library), the configuration ones from configs/*.yml plus a few small YAML
# files that reach the loader's corners. Inputs that fuzzing adds to a
# corpus later are kept; only the seeds (named below) are rewritten.
# usage: tests/fuzz/make_seeds.sh  (from anywhere; uses build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/../.."
for t in checkpoint config idx safetensors tokens tsv vocab tokenizer tok_text tok_files; do mkdir -p "tests/fuzz/$t/corpus"; done
make --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 \
  SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
  build-fuzz/tests/fuzz/make_seeds
build-fuzz/tests/fuzz/make_seeds

c=tests/fuzz/config/corpus
for f in configs/*.yml; do cp "$f" "$c/$(basename "$f" .yml)"; done
printf 'epochs: 2\nlr: 3e-4\nbatch_size: 8\ngradient_accumulation_steps: 4\nfp16: true\n' > "$c/aliases"
printf 'model: {name: mlp, sizes: [784, 128, 10]}\noptim: {name: sgd, momentum: 0.9, nesterov: true}\n' > "$c/flow"
printf 'optim:\n  betas: [0.9, 0.95]\n  schedule: cosine\n  warmup_steps: 10\ndist:\n  strategy: zero3\n  wrap: param\n' > "$c/lists"
printf 'train:\n  batch_size: 8\n  batch_size: 9\n' > "$c/duplicate"
printf 'train:\n  batch_sise: 8\n' > "$c/unknown_key"
printf 'base: &b {epochs: 3}\ntrain: *b\nexperiment_name: "quoted \\"name\\""\noutput_dir: ~\n' > "$c/anchors"
printf '%%YAML 1.1\n---\nseed: 7\nmode: test\n...\n' > "$c/document"
printf 'data:\n  name: tokens\n  train_path: "data/*.bin"\n  seq_len: 1024\ntrain: {max_steps: 5, save_strategy: steps, save_interval: 1}\n' > "$c/tokens"
# more tokenizer.json seeds (small enough for -max_len=4096): WordPiece with
# TemplateProcessing and padding, byte-level BPE as GPT-2's (merges "a b")
# and as RoBERTa's (merges as lists, RobertaProcessing, <mask> with lstrip),
# and two Unigram files: T5's layout (a small SentencePiece character map
# built from 7 rules: Ａ ﬁ e+U+0301 U+3000 U+0001 ａ ①, WhitespaceSplit +
# Metaspace, a sentinel) and the layout transformers gives a SentencePiece
# model without a class (Replace with regular expressions, byte_fallback with
# a few <0xNN> pieces, decoder Replace + ByteFallback + Fuse + Strip)
python3 - tests/fuzz/tokenizer/corpus <<'PY'
import json, os, sys
out = sys.argv[1]
def byte_chars():
    bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]
def save(name, obj):   # first byte 0: the target writes the rest as tokenizer.json
    with open(os.path.join(out, name), "wb") as f:
        f.write(b"\x00" + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
def added(i, c, lstrip=False):
    return {"id": i, "content": c, "single_word": False, "lstrip": lstrip, "rstrip": False,
            "normalized": False, "special": True}
special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
words = special + list("abcdehilnorstw.,!'") + ["##" + c for c in "abcdehilnorstw"] + ["the", "hello", "world", "##ing"]
wp_vocab = {w: i for i, w in enumerate(words)}
seq = lambda s, t: {"Sequence": {"id": s, "type_id": t}}
tok = lambda s, t: {"SpecialToken": {"id": s, "type_id": t}}
save("wordpiece", {"version": "1.0", "truncation": None,
     "padding": {"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                 "pad_type_id": 0, "pad_token": "[PAD]"},
     "added_tokens": [added(i, s) for i, s in enumerate(special)],
     "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                    "strip_accents": None, "lowercase": True},
     "pre_tokenizer": {"type": "BertPreTokenizer"},
     "post_processor": {"type": "TemplateProcessing", "single": [tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0)],
                        "pair": [tok("[CLS]", 0), seq("A", 0), tok("[SEP]", 0), seq("B", 1), tok("[SEP]", 1)],
                        "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                           "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
     "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
     "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
               "max_input_chars_per_word": 100, "vocab": wp_vocab}})
chars = byte_chars()
merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a")]
def bpe(specials):
    vocab = {s: i for i, s in enumerate(specials)}
    for c in chars: vocab[c] = len(vocab)
    for a, b in merges: vocab[a + b] = len(vocab)
    return vocab
bl = lambda prefix: {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": True, "use_regex": True}
v = bpe(["<|endoftext|>"])
save("bpe_gpt2", {"version": "1.0", "truncation": None, "padding": None,
     "added_tokens": [added(0, "<|endoftext|>")], "normalizer": None, "pre_tokenizer": bl(False),
     "post_processor": bl(False), "decoder": bl(False),
     "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
               "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": v,
               "merges": [a + " " + b for a, b in merges]}})
v = bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
save("bpe_roberta", {"version": "1.0", "truncation": None, "padding": None,
     "added_tokens": [added(i, s, s == "<mask>") for i, s in enumerate(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])],
     "normalizer": None, "pre_tokenizer": bl(True),
     "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                        "trim_offsets": True, "add_prefix_space": True},
     "decoder": bl(True),
     "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": v,
               "merges": [[a, b] for a, b in merges]}})
CHARSMAP = ("AAQAAAAMAAAAAACAAQ0AAMwYAgCBBQAADAAAgJGEAgCgPQAAAwAAgIAMAgCABQAAAQAAgKwAAgCBDQAACQAAgKF9AAAFAACAgQ0AAAcAAIARAAAAFgAA"
            "ABcAAAAUAAAAFQAAABoAAAAbAAAAGAAAABkAAAC8yAIAvTQCABwAAAAdAAAAIgAAACMAAAAgAAAAIQAAACYAAAAnAAAAJAAAACUAAAAqAAAAKwAA"
            "ACgAAAApAAAALgAAAC8AAAAsAAAALQAAADIAAAAzAAAAMAAAADEAAAA2AAAANwAAADQAAAA1AAAAOgAAADsAAAA4AAAAOQAAAD4AAAA/AAAAPAAA"
            "AD0AAABCAAAAQwAAAEAAAABBAAAARgAAAEcAAABEAAAARQAAAEoAAABLAAAASAAAAEkAAABOAAAATwAAAEwAAABNAAAAUgAAAFMAAABQAAAAUQAA"
            "AFYAAABXAAAAVAAAAFUAAABaAAAAWwAAAFgAAABZAAAAXgAAAF8AAABcAAAAXQAAAGIAAABjAAAAYAAAAGEAAABmAAAAZwAAAGWkAgBlAAAAagAA"
            "AGsAAABoAAAAaQAAAG4AAABvAAAAbAAAAG0AAAByAAAAcwAAAHAAAABxAAAAdgAAAHcAAAB0AAAAdQAAAHoAAAB7AAAAeAAAAHkAAAB+AAAAfwAA"
            "AHwAAAB9AAAAggAAAIMAAACAAAAAgQAAAIYAAACHAAAAhAAAAIUAAACKAAAAiwAAAIgAAACJAAAAjgAAAI8AAACMAAAAjQAAAJIAAACTAAAAkAAA"
            "AJEAAACWAAAAlwAAAJQAAACVAAAAmgAAAJsAAACYAAAAmQAAAJ4AAACfAAAAnAAAAJ0AAACiAAAAowAAAKAAAAChAAAApgAAAKcAAACkAAAApQAA"
            "AKoAAACrAAAAqAAAAKkAAACuAAAArwAAAKwAAACtAAAAsgAAALMAAACwAAAAsQAAALYAAAC3AAAAtAAAALUAAAC6AAAAuwAAALgAAAC5AAAAvgAA"
            "AL8AAAC8AAAAvQAAAMIAAADDAAAAwAAAAMEAAADGAAAAxwAAAMQAAADFAAAAygAAAMsAAADIAAAAyQAAAM4AAADPAAAAzAAAAM0AAADSAAAA0wAA"
            "ANAAAADRAAAA1gAAANcAAADUAAAA1QAAANoAAADbAAAA2AAAANkAAADeAAAA3wAAANwAAADdAAAA46QBAOLYAQDgAAAA4QAAAOYAAADnAAAA5AAA"
            "AOUAAADqAAAA6wAAAOgAAADpAAAA7zABAO8AAADsAAAA7QAAAPIAAADzAAAA8AAAAPEAAAD2AAAA9wAAAPQAAAD1AAAA+gAAAPsAAAD4AAAA+QAA"
            "AP4AAAD/AAAA/AAAAP0AAAAAIAAxAEEAYQBmaQDDqQA=")
pieces = [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["\u2581", -1.59], ["e", -2.26], ["n", -2.67], ["th", -2.76],
          ["d", -2.89], ["o", -2.89], ["at", -2.96], ["l", -3.18], ["r", -3.18], ["a", -3.49], ["g", -3.59],
          ["in", -3.59], ["\u2581c", -3.6], ["\u2581he", -3.93], ["ea", -4.23], ["i", -4.28], ["h", -4.28],
          [".", -4.28], ["G", -4.28], ["w", -4.28]]
t5_specials = ["<pad>", "</s>", "<unk>"]
eos_template = {"type": "TemplateProcessing", "single": [seq("A", 0), tok("</s>", 0)],
                "pair": [seq("A", 0), tok("</s>", 0), seq("B", 0), tok("</s>", 0)],
                "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}}
metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
save("unigram", {"version": "1.0", "truncation": None, "padding": None,
     "added_tokens": [added(i, s) for i, s in enumerate(t5_specials)] + [added(len(pieces), "<extra_id_0>")],
     "normalizer": {"type": "Sequence", "normalizers": [{"type": "Precompiled", "precompiled_charsmap": CHARSMAP},
                    {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
     "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]},
     "post_processor": eos_template, "decoder": metaspace,
     "model": {"type": "Unigram", "unk_id": 2, "vocab": pieces + [["<extra_id_0>", 0.0]], "byte_fallback": False}})
byte_pieces = [["<0x%02X>" % b, -5.0] for b in (0x20, 0x98, 0x83, 0xC3, 0xA9, 0xE2)]
replace = lambda kind, pat, content: {"type": "Replace", "pattern": {kind: pat}, "content": content}
save("unigram_bf", {"version": "1.0", "truncation": None, "padding": None,
     "added_tokens": [added(i, s) for i, s in enumerate(t5_specials)],
     "normalizer": {"type": "Sequence", "normalizers": [
         {"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "strip_left": False, "strip_right": True},
         replace("Regex", "\\A +| +\\z", ""), replace("Regex", " {2,}", " "), replace("String", " ", "\u2581"),
         replace("Regex", "\\A\u2581", "\u2581\u2581"), {"type": "Prepend", "prepend": "\u2581"}]},
     "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
     "post_processor": eos_template,
     "decoder": {"type": "Sequence", "decoders": [replace("String", "\u2581", " "), {"type": "ByteFallback"},
                 {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
     "model": {"type": "Unigram", "unk_id": 2, "vocab": pieces + byte_pieces, "byte_fallback": True}})
PY
t=tests/fuzz/tok_text/corpus
printf '\000In the beginning God created the heaven and the earth.' > "$t/kjv"
printf '\003H\303\251llo, w\303\266rld! na\303\257ve caf\303\251\037It'"'"'s a pair' > "$t/accents_pair"
printf '\200\344\270\255\346\226\207 \360\237\230\200 \t\n  spaces   ' > "$t/cjk_emoji_space"
printf '\045%s' "don't   I'll"$'\037'"we've   they're" > "$t/contractions"
printf '\000bad \377 utf8 \300\200' > "$t/invalid_utf8"
f=tests/fuzz/tok_files/corpus
printf '\000[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n,\n##s\nit\n'"'"'\ncafe\n' > "$f/vocab_txt"
python3 - "$f/gpt2_files" <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("\u0120", "w")]
for a, b in merges: vocab[a + b] = len(vocab)
vocab["<|endoftext|>"] = len(vocab)
text = json.dumps(vocab, ensure_ascii=False, separators=(",", ":")) + "\x1e#version: 0.2\n"
text += "".join(a + " " + b + "\n" for a, b in merges)
open(sys.argv[1], "wb").write(b"\x01" + text.encode("utf-8"))
PY
echo "seeds written: $(find tests/fuzz/*/corpus -type f | wc -l) files"
