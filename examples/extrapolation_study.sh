#!/usr/bin/env bash
# examples/extrapolation_study.sh — the length-extrapolation study (docs/results/extrapolation.md) in
# one command: a preset of `ctxlab study` (docs/evaluation.md, "ctxlab study"), nothing more. It runs
#   ctxlab study --study examples/studies/extrapolation.json --out DIR
# which trains the same small model with each positional encoding at a short context L on the
# training split of the shipped corpus (3 seeds), evaluates each at L, 2L, 4L, 8L on the held-out
# split, evaluates the RoPE model with every context-extension method without training and with
# the two baselines (learned segmented, RoPE sliding window), fine-tunes it at 4L with PI, YaRN and
# without scaling, and runs RoPE and all of that again with a BPE tokenizer (bpe_rope*: 4000 word
# pieces, trained by the study on its training split; L counts tokens). Writes DIR/summary.md
# (mean and 95% interval over the seeds, significance), summary.json, ppl.csv, positions.csv and
# DIR/report.html (charts). Run it again to resume: finished jobs are skipped.
#
#   examples/extrapolation_study.sh                # full study (205 jobs, hours on 2 cores)
#   examples/extrapolation_study.sh --quick        # smoke run (examples/studies/extrapolation_quick.json, ~1 min)
#   examples/extrapolation_study.sh --dry-run      # list the jobs (and which are done)
#
# Options: --quick, --out DIR (default runs/extrapolation-study[-quick]), --bin PATH (default
#          build/ctxlab), --study FILE (another study file, e.g. an edited copy of the preset),
#          --steps N (train.steps of the preset), --ft-steps N (the steps of each of its fine-tunes),
#          --fresh (remove DIR, a study directory, and start over), --dry-run, --max-jobs N (passed
#          to ctxlab study), --plugin PATH.so (repeatable: `ctxlab --plugin PATH.so study`, its jobs
#          load it too; docs/extending.md), --add-encoding NAME or NAME='POSENC_JSON' (repeatable: one
#          more "encodings" entry, e.g. --plugin libfire.so
#          --add-encoding 'fire-example={"type":"fire-example","init_L":128}').
# --steps, --ft-steps and --add-encoding write the changed study file to DIR/preset.json and run
# that (the same options again resume the same study). Gone: --doc (the report is DIR/summary.md
# and DIR/report.html; docs/results/extrapolation.md is written from them) and --tokenizer (the
# study trains its own: "tokenizers" in the study file).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
die() { echo "extrapolation_study.sh: $*" >&2; exit 2; }
quick=0; out=""; bin="$root/build/ctxlab"; study=""; steps=""; ft_steps=""; fresh=0
plugins=(); added=(); pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --out|--bin|--study|--steps|--ft-steps|--plugin|--add-encoding|--max-jobs)
      [ $# -ge 2 ] || die "$1 needs a value (see --help)"
      case "$1" in
        --out) out="$2" ;;
        --bin) bin="$2" ;;
        --study) study="$2" ;;
        --steps) steps="$2" ;;
        --ft-steps) ft_steps="$2" ;;
        --plugin) plugins+=(--plugin "$2") ;;
        --add-encoding) added+=("$2") ;;
        --max-jobs) pass+=(--max-jobs "$2") ;;
      esac
      shift ;;
    --fresh) fresh=1 ;;
    --dry-run) pass+=(--dry-run) ;;
    --doc) die "--doc is gone: the study writes its report itself, DIR/summary.md (tables: mean and 95% interval over the seeds) and DIR/report.html (charts); docs/results/extrapolation.md is written from them" ;;
    --tokenizer) die "--tokenizer is gone: the study trains its BPE tokenizer itself on its training split (\"tokenizers\" in examples/studies/extrapolation.json, cells bpe_rope*); for another one, edit \"tokenizers\" in a copy of the preset and pass --study COPY" ;;
    -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[ -x "$bin" ] || die "no ctxlab binary at $bin (build first, or pass --bin)"
for n in "$steps" "$ft_steps"; do
  [ -z "$n" ] || [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "--steps / --ft-steps: expected an integer >= 1, got '$n'"
done
if [ "$quick" = 1 ]; then
  study=${study:-$here/studies/extrapolation_quick.json}; out=${out:-$root/runs/extrapolation-study-quick}
else
  study=${study:-$here/studies/extrapolation.json}; out=${out:-$root/runs/extrapolation-study}
fi
[ -f "$study" ] || die "--study $study: no such file"
if [ "$fresh" = 1 ] && [ -e "$out" ]; then
  [ -f "$out/study.json" ] || die "--fresh: $out is not a study directory (no study.json); not removing it"
  rm -rf "$out"
fi

# The overrides: a copy of the study file with them, in DIR/preset.json.
if [ -n "$steps$ft_steps" ] || [ ${#added[@]} -gt 0 ]; then
  python3 - "$study" "$out/preset.json" "$steps" "$ft_steps" "${added[@]}" <<'EOF' || exit 2
import json, os, sys
src, dst, steps, ft_steps, added = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
with open(src) as f:
    j = json.load(f)
if steps:
    j["train"]["steps"] = int(steps)
if ft_steps:
    for ft in j.get("finetunes", {}).values():
        ft["steps"] = int(ft_steps)
for a in added:
    name, eq, posenc = a.partition("=")
    try:
        j["encodings"][name] = json.loads(posenc) if eq else name
    except ValueError as e:
        sys.exit(f"extrapolation_study.sh: --add-encoding {a}: POSENC_JSON is not JSON ({e})")
os.makedirs(os.path.dirname(os.path.abspath(dst)), exist_ok=True)
with open(dst, "w") as f:
    json.dump(j, f, indent=1)
    f.write("\n")
EOF
  study="$out/preset.json"
fi

export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
echo "+ $bin${plugins[*]:+ ${plugins[*]}} study --study $study --out $out ${pass[*]}"
"$bin" "${plugins[@]}" study --study "$study" --out "$out" "${pass[@]}"
case " ${pass[*]} " in
  *" --dry-run "*) ;;
  *) echo "extrapolation_study.sh: the report is $out/summary.md and $out/report.html" ;;
esac
