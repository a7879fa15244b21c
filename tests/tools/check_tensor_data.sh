#!/usr/bin/env bash
# The backend rule: outside src/backend (and src/core, which implements
# ut_tensor_set/ut_tensor_get), no library file reads or writes tensor data.
# A file breaks it when, comments removed, its code contains one of
#   ->data   (not ->data.member)   ->grad   ut_f32(   ut_i32(   ut_tensor_wrap(
# (a tensor wrapped over host memory would hand kernels host memory on a
# device; inputs are copied in with ut_tensor_from).
# The files that still do are listed in tensor_data_allow.txt, one path a
# line; a file on the list that no longer breaks the rule fails too, so the
# list only shrinks. It also checks that core's private header
# (src/core/internal.h) is included only by src/core, src/ops and
# src/backend. Prints one line per problem and "N passed, N failed".
# usage: check_tensor_data.sh [ROOT [ALLOWLIST]]   (ROOT: the repository)
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=${1:-$here/../..}
allow=${2:-$here/tensor_data_allow.txt}
cd "$root" || { echo "check_tensor_data: cannot enter $root"; echo "0 passed, 1 failed"; exit 1; }
[ -r "$allow" ] || { echo "check_tensor_data: cannot read $allow"; echo "0 passed, 1 failed"; exit 1; }
cc=${CC:-cc}
pattern='->data([^.[:alnum:]_]|$)|->grad([^[:alnum:]_]|$)|ut_f32\(|ut_i32\(|(^|[^*[:alnum:]_])ut_tensor_wrap\('
allowed=$(grep -v '^[[:space:]]*\(#.*\)\?$' "$allow")
pass=0; fail=0
is_allowed() { grep -qxF -- "$1" <<<"$allowed"; }
for f in $(find src include -name '*.[ch]' | sort); do
    case $f in src/backend/*|src/core/*) continue ;; esac
    # comments out, macros not expanded
    hits=$("$cc" -fpreprocessed -dD -E -P -x c "$f" 2>/dev/null | grep -cE -- "$pattern")
    if [ "$hits" -gt 0 ] && ! is_allowed "$f"; then
        echo "check_tensor_data: $f touches tensor data outside src/backend ($hits lines):"
        "$cc" -fpreprocessed -dD -E -P -x c "$f" 2>/dev/null | grep -nE -- "$pattern" | head -5 | sed 's/^/    /'
        echo "    use ut_tensor_set / ut_tensor_get or a backend call instead"
        fail=$((fail + 1))
    elif [ "$hits" -eq 0 ] && is_allowed "$f"; then
        echo "check_tensor_data: $f no longer touches tensor data: remove it from $(basename "$allow")"
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
done
# kernels take their context's services from their ut_kctx argument, never
# from the tensor's context (backend.h, "What a kernel gets")
for f in $(find src/backend -name '*.c' 2>/dev/null | sort); do
    hits=$("$cc" -fpreprocessed -dD -E -P -x c "$f" 2>/dev/null | grep -cE -- '->ctx([^[:alnum:]_]|$)')
    if [ "$hits" -gt 0 ]; then
        echo "check_tensor_data: $f reaches into a tensor's context ($hits lines); use the kernel's ut_kctx k"
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
done
for f in $(grep -rlE '#include[[:space:]]+"([./]*core/)?internal\.h"' src include 2>/dev/null | sort); do
    case $f in src/core/*|src/ops/*|src/backend/*) pass=$((pass + 1)) ;;
    *) echo "check_tensor_data: $f includes core's private header internal.h (only core, ops and backends may)"
       fail=$((fail + 1)) ;;
    esac
done
while read -r f; do
    [ -n "$f" ] && [ ! -f "$f" ] && { echo "check_tensor_data: $f is allowed but does not exist: remove it from the list"; fail=$((fail + 1)); }
done <<<"$allowed"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
