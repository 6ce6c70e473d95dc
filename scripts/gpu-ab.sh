#!/usr/bin/env bash
# Same-call A/B of two or more packed builds (scripts/pack-gpu-build.sh tarballs, or folders holding apps/flashot):
# every case runs each build in turn, ROUNDS times, so that clock and thermal drift hit all of them alike; prints one
# line per case and round with each build's median (ms) and a last line per case with the medians of the rounds.
# The way every kernel change of sessions 5-8 was judged (docs/benchmarks.md); on the GPU machine, e.g.
#   CASES="100000:64:auto 10000:64:auto 10000:3:auto" bash scripts/gpu-ab.sh CARRY/main.tar.xz CARRY/new.tar.xz
# CASES: n:d:screening (screening auto | on | off; default the four issue-3 cases). ROUNDS (2), REPEATS (9): solves
# per median. BACKEND (cuda): cpu gives a dry run of the script itself on a machine without a GPU. EXTRA: more
# `flashot bench` options (e.g. "--scheme alternating"). Exit status 1 when a build fails to run a case.
set -uo pipefail
if (($# < 2)); then
  echo "usage: [CASES=...] [ROUNDS=2] [REPEATS=9] scripts/gpu-ab.sh BUILD_A BUILD_B [BUILD_C ...]" >&2
  exit 2
fi
cases=${CASES:-100000:3:auto 10000:3:auto 100000:64:auto 10000:64:auto}
rounds=${ROUNDS:-2}
repeats=${REPEATS:-9}
backend=${BACKEND:-cuda}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Each build: a folder with apps/flashot (and lib/ for its shared libraries).
builds=()
names=()
for arg in "$@"; do
  name=$(basename "$arg")
  name=${name%.tar.xz}
  if [[ -f $arg ]]; then
    dest=$work/$((${#builds[@]}))
    mkdir -p "$dest"
    python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$arg" "$dest" || {
      echo "gpu-ab: cannot unpack $arg" >&2
      exit 1
    }
    [[ -d $dest/gpu ]] && dest=$dest/gpu
  elif [[ -d $arg ]]; then
    dest=$arg
    [[ ! -x $dest/apps/flashot && -d $dest/gpu ]] && dest=$dest/gpu
  else
    echo "gpu-ab: $arg is neither a tarball nor a folder" >&2
    exit 1
  fi
  if [[ ! -x $dest/apps/flashot ]]; then
    echo "gpu-ab: $arg holds no apps/flashot" >&2
    exit 1
  fi
  builds+=("$dest")
  names+=("$name")
done

status=0
median() { python3 -c "import statistics, sys; v = [float(x) for x in sys.argv[1:]]; print('%.3f' % statistics.median(v) if v else 'n/a')" "$@"; }
for c in $cases; do
  IFS=: read -r n d screening <<< "$c"
  if [[ -z $n || -z $d ]]; then
    echo "gpu-ab: case '$c' is not n:d[:screening]" >&2
    exit 2
  fi
  screening=${screening:-auto}
  declare -A seen=()
  for ((r = 1; r <= rounds; ++r)); do
    line="n=$n d=$d screening=$screening round $r:"
    for i in "${!builds[@]}"; do
      b=${builds[$i]}
      # shellcheck disable=SC2086  # EXTRA is a list of options
      out=$(LD_LIBRARY_PATH=$b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 120 "$b/apps/flashot" bench --n "$n" --m "$n" \
        --d "$d" --eps 0.1 --iters 10 --backend "$backend" --repeats "$repeats" --screening "$screening" --csv \
        ${EXTRA:-} 2>&1 | tail -1)
      ms=${out##*,}
      if ! [[ $ms =~ ^[0-9.]+$ ]]; then
        echo "gpu-ab: ${names[$i]} failed on n=$n d=$d: $out" >&2
        ms=failed
        status=1
      else
        seen[$i]="${seen[$i]:-} $ms"
      fi
      line="$line ${names[$i]}=$ms"
    done
    echo "$line"
  done
  line="n=$n d=$d screening=$screening median of rounds:"
  for i in "${!builds[@]}"; do
    # shellcheck disable=SC2086  # the list of medians
    line="$line ${names[$i]}=$(median ${seen[$i]:-})"
  done
  echo "$line"
  unset seen
done
exit $status
