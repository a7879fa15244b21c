# Rotten Tomatoes corpus (CSV: category,filename,text,movie_name; quoted
# fields may span lines) -> SST-2 TSV files out/{train,dev,test}.tsv with a
# header "sentence<TAB>label": fresh = 1, rotten = 0, plot rows dropped.
# White space inside a snippet (tabs, newlines) becomes one space. The order
# is shuffled with a fixed seed (Park-Miller generator, exact in any awk's
# double arithmetic) and split 80/10/10.
# Usage: bzip2 -dc rotten_tomatoes_corpus.csv.bz2 | awk -v out=DIR -f rt-to-tsv.awk
BEGIN { n = 0; pending = ""; header = 1 }

# Splits one complete CSV record into f[1..k]; returns k.
function csv_split(rec, f,    k, i, c, q, cur) {
    k = 0; cur = ""; q = 0
    for (i = 1; i <= length(rec); i++) {
        c = substr(rec, i, 1)
        if (q) {
            if (c == "\"") {
                if (substr(rec, i + 1, 1) == "\"") { cur = cur "\""; i++ } else q = 0
            } else cur = cur c
        } else if (c == "\"") q = 1
        else if (c == ",") { f[++k] = cur; cur = "" }
        else cur = cur c
    }
    f[++k] = cur
    return k
}

{
    sub(/\r$/, "")
    pending = pending == "" ? $0 : pending "\n" $0
    tmp = pending
    if (gsub(/"/, "", tmp) % 2) next          # a quoted field goes on
    rec = pending; pending = ""
    if (header) { header = 0; next }
    nf = csv_split(rec, f)
    if (nf != 4) { printf "rt-to-tsv: a record after snippet %d has %d fields, not 4\n", n, nf > "/dev/stderr"; exit 1 }
    if (f[1] == "plot") next
    if (f[1] != "fresh" && f[1] != "rotten") { printf "rt-to-tsv: unknown category \"%s\"\n", f[1] > "/dev/stderr"; exit 1 }
    t = f[3]
    gsub(/[ \t\n\r]+/, " ", t); sub(/^ /, "", t); sub(/ $/, "", t)
    if (t == "") next
    text[n] = t; label[n] = f[1] == "fresh" ? 1 : 0; n++
}

END {
    if (pending != "") { print "rt-to-tsv: the CSV ends inside a quoted field" > "/dev/stderr"; exit 1 }
    if (n < 10) { print "rt-to-tsv: fewer than 10 snippets" > "/dev/stderr"; exit 1 }
    seed = 20240521
    for (i = n - 1; i > 0; i--) {           # Fisher-Yates
        seed = (seed * 16807) % 2147483647
        j = seed % (i + 1)
        x = text[i]; text[i] = text[j]; text[j] = x
        y = label[i]; label[i] = label[j]; label[j] = y
    }
    ntrain = int(n * 0.8); ndev = int(n * 0.1)
    for (s = 0; s < 3; s++) {
        file = out "/" (s == 0 ? "train" : s == 1 ? "dev" : "test") ".tsv"
        lo = s == 0 ? 0 : s == 1 ? ntrain : ntrain + ndev
        hi = s == 0 ? ntrain : s == 1 ? ntrain + ndev : n
        print "sentence\tlabel" > file
        for (i = lo; i < hi; i++) print text[i] "\t" label[i] > file
        close(file)
    }
}
