#!/usr/bin/env bash
# scripts/mutate.sh — the mutation score (docs/testing.md, "Mutation score").
#
#   scripts/mutate.sh [-l LIST] [-o RESULTS] [-t SECONDS] [-b N] [LABEL ...]
#
# Applies the mutations of LIST (default scripts/mutations.txt) one at a time to a copy of the
# tracked files of this work tree (build-mut/src: your own files are never touched), rebuilds
# incrementally only the targets the mutation names, runs the tests it names with a timeout, and
# reports each mutant killed (a test failed, or it hung past the timeout: "killed (timeout)"),
# survived (the tests passed), or invalid (the mutant did not build, or its snippet is not in the
# file exactly once: not counted). Score = killed / (killed + survived). Before the mutants, every
# test selector of the run must pass on the unmutated copy (else the run stops: a failing test
# would "kill" every mutant). Each mutant's build + tests hold /tmp/ctxlab-build.lock (the shared
# machine's build lock), the rest of the run does not; -b N: N mutants per hold (default 1; the
# baseline is one hold). The mutated file is restored after each mutant, and on any exit (Ctrl-C
# included). LABELs: run only those mutations. Not part of the README's test command (slow).
#
# LIST: one mutation per line, five tab-separated fields (blank lines and #-comments ignored):
#   label   file   original   replacement   selector
# `original` occurs exactly once in `file`; in both snippets \t and \n stand for a tab and a
# newline. `selector`: gtest:FILTER (build/ctxlab_tests), emu-gtest:FILTER (the emulator build,
# for core/cuda), emu-self:FILTER (the emulator's self-tests, cuda_emu_tests of the emulator
# build, for core/cuda/emu), or ctest:REGEX (ctest -R in the default build; builds ctxlab and the test tool
# ctxlab_optim_driver).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
list=scripts/mutations.txt results=build-mut/results.txt timeout_s=300 batch=1
while getopts "l:o:t:b:h" o; do
  case $o in
    l) list=$OPTARG ;;
    o) results=$OPTARG ;;
    t) timeout_s=$OPTARG ;;
    b) batch=$OPTARG ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[[ -f $list ]] || { echo "mutate.sh: no list $list" >&2; exit 2; }
lock=/tmp/ctxlab-build.lock
work=$root/build-mut src=$root/build-mut/src
launch=""  # ccache where the machine has it (scripts/setup.sh does not install it)
command -v ccache >/dev/null && launch="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"

# The mutations to run: label, file, original, replacement, selector (arrays, in list order).
labels=() files=() origs=() repls=() sels=()
while IFS=$'\t' read -r label file orig repl sel extra || [[ -n ${label:-} ]]; do
  [[ -z $label || $label == \#* ]] && continue
  if [[ -z ${sel:-} || -n ${extra:-} ]]; then
    echo "mutate.sh: $list: '$label' must have exactly five tab-separated fields" >&2
    exit 2
  fi
  if (($# > 0)); then
    want=0
    for l in "$@"; do [[ $l == "$label" ]] && want=1; done
    ((want)) || continue
  fi
  labels+=("$label") files+=("$file") origs+=("$orig") repls+=("$repl") sels+=("$sel")
done <"$list"
((${#labels[@]} > 0)) || { echo "mutate.sh: no mutation selected" >&2; exit 2; }
dups=$(printf '%s\n' "${labels[@]}" | sort | uniq -d)
[[ -z $dups ]] || { echo "mutate.sh: duplicate labels: $dups" >&2; exit 2; }

# The copy: the tracked files as they are in the work tree now. Only a file whose content differs
# from the copy's is written (a fresh modification time: it rebuilds); the others keep theirs.
mkdir -p "$src"
git ls-files -z | python3 -c '
import os, sys
src = sys.argv[1]
for f in sys.stdin.buffer.read().decode().split("\0"):
    if not f or not os.path.isfile(f):
        continue
    new, dst = open(f, "rb").read(), os.path.join(src, f)
    if not os.path.exists(dst) or open(dst, "rb").read() != new:
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        open(dst, "wb").write(new)
        os.chmod(dst, os.stat(f).st_mode)
' "$src"

current=""  # the file under mutation, restored on any exit
restore() {
  if [[ -n $current ]]; then
    cp "$work/original" "$src/$current"  # a fresh mtime: the next build recompiles the original
    current=""
  fi
}
trap restore EXIT
trap 'restore; echo "mutate.sh: interrupted" >&2; exit 130' INT TERM

configure() {  # build dir, extra cmake options
  [[ -f $1/build.ninja ]] && return 0
  cmake -S "$src" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release $launch "${@:2}" >"$1.configure.log" 2>&1 ||
    { echo "mutate.sh: configuring $1 failed (see $1.configure.log)" >&2; return 1; }
}

# Build + tests of one selector (the caller holds the lock); exit status 0 passed, 3 build failed,
# 4 timed out, 5 the selector matches no test, anything else: a test failed. Output to $2.
run_selector() {
  local sel=$1 log=$2 kind=${1%%:*} arg=${1#*:} dir targets rc bin=ctxlab_tests
  case $kind in
    gtest) dir=$work/build targets=ctxlab_tests ;;
    emu-gtest) dir=$work/build-emu targets=ctxlab_tests ;;
    emu-self) dir=$work/build-emu targets=cuda_emu_tests bin=cuda_emu_tests ;;
    ctest) dir=$work/build targets="ctxlab ctxlab_optim_driver" ;;
    *) echo "mutate.sh: unknown selector kind '$kind' in '$sel'" >&2; return 2 ;;
  esac
  {
    ninja -C "$dir" -j2 $targets >/dev/null 2>&1 || { ninja -C "$dir" -j1 $targets 2>&1 | tail -30; return 3; }
    if [[ $kind == ctest ]]; then
      timeout -k 10 "$timeout_s" ctest --test-dir "$dir" -R "$arg" -j2 --no-tests=error --output-on-failure
    else
      "$dir/$bin" --gtest_list_tests --gtest_filter="$arg" | grep -q "^  " || return 5
      timeout -k 10 "$timeout_s" "$dir/$bin" --gtest_brief=1 --gtest_filter="$arg"
    fi
    rc=$?
    ((rc == 124 || rc == 137)) && return 4
    return $rc
  } >"$log" 2>&1
}

exec 9>"$lock"  # flock 9: take the machine's build lock; flock -u 9: give it back

mkdir -p "$work/logs"
configure "$work/build"
printf '%s\n' "${sels[@]}" | grep -q '^emu-\(gtest\|self\):' && configure "$work/build-emu" -DCTXLAB_CUDA_EMULATOR=ON

# Baseline: every selector passes on the unmutated copy (one hold of the lock).
mapfile -t uniq_sels < <(printf '%s\n' "${sels[@]}" | sort -u)
echo "mutate.sh: baseline, ${#uniq_sels[@]} test selectors on the unmutated copy"
flock 9
for sel in "${uniq_sels[@]}"; do
  if ! run_selector "$sel" "$work/logs/baseline.log"; then
    echo "mutate.sh: the unmutated copy fails '$sel' (build-mut/logs/baseline.log); fix that first" >&2
    tail -20 "$work/logs/baseline.log" >&2
    exit 1
  fi
done
flock -u 9

killed=0 survived=0 invalid=0
{
  echo "# scripts/mutate.sh $(date -u '+%Y-%m-%d %H:%M UTC'), $(git rev-parse --short HEAD)$(git diff --quiet || echo ' + uncommitted changes')"
  echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; timeout ${timeout_s}s per mutant"
} >"$results"
for i in "${!labels[@]}"; do
  ((i % batch == 0)) && flock 9
  label=${labels[$i]} file=${files[$i]} sel=${sels[$i]}
  log=$work/logs/$label.log
  cp "$src/$file" "$work/original"
  current=$file
  if ! python3 - "$src/$file" "${origs[$i]}" "${repls[$i]}" <<'EOF'; then
import sys
path, orig, repl = sys.argv[1], *(a.replace("\\t", "\t").replace("\\n", "\n") for a in sys.argv[2:])
text = open(path).read()
n = text.count(orig)
if n != 1:
    print(f"the original snippet occurs {n} times in the file (must be once)")
    sys.exit(1)
open(path, "w").write(text.replace(orig, repl))
EOF
    verdict="invalid (snippet not found exactly once)"
    invalid=$((invalid + 1))
  else
    set +e
    run_selector "$sel" "$log"
    rc=$?
    set -e
    case $rc in
      0) verdict=survived survived=$((survived + 1)) ;;
      3) verdict="invalid (does not build)" invalid=$((invalid + 1)) ;;
      4) verdict="killed (timeout: hung past ${timeout_s}s)" killed=$((killed + 1)) ;;
      5) verdict="invalid (the selector matches no test)" invalid=$((invalid + 1)) ;;
      *) verdict=killed killed=$((killed + 1)) ;;
    esac
  fi
  restore
  ((i % batch == batch - 1)) && flock -u 9
  line=$(printf '%-34s %-40s %s' "$label" "$file" "$verdict")
  echo "$line"
  echo "$line" >>"$results"
done
total=$((killed + survived))
score=$(awk -v k=$killed -v t=$total 'BEGIN { printf t ? "%.1f" : "n/a", 100 * k / t }')
summary="score: $killed killed / $total valid mutants = $score% ($survived survived, $invalid invalid)"
echo "$summary"
echo "# $summary" >>"$results"
echo "mutate.sh: results in $results, logs in $work/logs"
((survived == 0))
