#!/bin/bash
# Issue 22's accuracy target: the multiscale solve's cost within 1e-4 (relative) of the dense solver's at the same ε
# and tolerance, and its time against dense (target at 1M, d = 50: ≥ 5× faster). For each case, the same problem
# (flashot bench --end-to-end, seeded, --pair deformed) solved twice, --multiscale on and --multiscale off, then one
# line per case: both dual costs ⟨a,f⟩ + ⟨b,g⟩, their relative difference, both primal costs, marginal errors,
# iterations, solve seconds and the ratio. A run stopped by its iteration budget (MAX_ITERATIONS, all ε stages) or
# by RUN_TIMEOUT is printed as not converged: its cost then says nothing about the target.
# EVAL=1 also saves both runs' points and potentials and judges both with one exact evaluator
# (multiscale_peers.py evaluate: every row and column, fp32 blocks, fp64 sums; torch on CUDA when present).
#
# usage: BUILD=build-dir (apps/flashot in it) [N=1000000] [CASES="D:DATA:BLUR ..."] [TOL=1e-4] [PAIR=deformed]
#        [MAX_ITERATIONS=300] [RUN_TIMEOUT=150] [FLASHOT_ARGS="--scheme alternating"] [BACKEND=cuda] [EVAL=0]
#        [OUTDIR=out-msd] multiscale_dense.sh
#   CASES: D:DATA:BLUR[:PAIR] (BLUR relative to the diameter; DATA: flashot bench --data, the surfaces sphere, bumpy,
#   torus need D = 3; PAIR: flashot bench --pair, default $PAIR). The defaults, and why: docs/benchmarks.md,
#   "Multiscale (issue 22)", "Beside dense at 1M × 1M". All of them take ≈ 6–8 minutes on one H200:
#   split them over two calls of ≤ 10 minutes (the d = 3 cases, then the d = 50 ones).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
N=${N:-1000000} TOL=${TOL:-1e-4} PAIR=${PAIR:-deformed} MAX_ITERATIONS=${MAX_ITERATIONS:-300}
RUN_TIMEOUT=${RUN_TIMEOUT:-150} FLASHOT_ARGS=${FLASHOT_ARGS---scheme alternating} BACKEND=${BACKEND:-cuda}
EVAL=${EVAL:-0} OUTDIR=${OUTDIR:-out-msd}
CASES=${CASES:-3:bumpy:0.02 3:uniform:0.02 3:mixture:0.1 50:uniform:0.05 50:mixture:0.2 50:mixture:0.05:matched}
flashot=${BUILD:?set BUILD (the build directory with apps/flashot)}/apps/flashot
[[ -x $flashot ]] || { echo "multiscale_dense.sh: no $flashot" >&2; exit 2; }
# A packed build (scripts/pack-gpu-build.sh) brings libsleef and libgomp in BUILD/lib: for flashot only, not for
# the Python processes (torch loads its own).
flashot_env=()
[[ -d ${BUILD}/lib ]] && flashot_env=(env "LD_LIBRARY_PATH=$(cd "$BUILD/lib" && pwd):${LD_LIBRARY_PATH:-}")
mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd)
python=${PYTHON:-python3}
for c in $CASES; do
  IFS=: read -r d data blur pair <<< "$c"
  pair=${pair:-$PAIR}
  for ms in on off; do
    run=$OUTDIR/$d-$data-$blur-$pair-$ms
    rm -rf "$run" && mkdir -p "$run"
    save=()
    [[ $EVAL == 1 ]] && save=(--save-potentials "$run/potentials")
    [[ $EVAL == 1 && $ms == on ]] && save+=(--save-points "$OUTDIR/$d-$data-$blur-$pair-points")
    echo "== n = m = $N, d = $d, $data / $pair, blur $blur of the diameter, tolerance $TOL, multiscale $ms" >&2
    # shellcheck disable=SC2086  # FLASHOT_ARGS is a list of options
    timeout "$RUN_TIMEOUT" "${flashot_env[@]}" "$flashot" bench --end-to-end --n "$N" --d "$d" --data "$data" \
      --pair "$pair" --blur-relative "$blur" --tolerance "$TOL" --max-iterations "$MAX_ITERATIONS" --multiscale "$ms" \
      --backend "$BACKEND" $FLASHOT_ARGS "${save[@]}" > "$run/flashot.json" 2> "$run/flashot.err"
    echo $? > "$run/rc"
  done
done
"$python" - "$OUTDIR" "$RUN_TIMEOUT" "$PAIR" $CASES <<'PY'
import json, os, sys
out, limit, default_pair, cases = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def load(run):
    rc = int(open(os.path.join(run, "rc")).read())
    text = open(os.path.join(run, "flashot.json")).read().strip()
    if rc != 0 or not text:
        err = open(os.path.join(run, "flashot.err")).read().strip().splitlines()
        return None, ("timed out after " + limit + " s" if rc == 124 else f"exit {rc}: " + (err[-1] if err else ""))
    return json.loads(text.splitlines()[-1]), ""
print("multiscale vs dense, same problem, ε and tolerance; cost = dual ⟨a,f⟩+⟨b,g⟩; rel = |ms − dense| / |dense| "
      "(target ≤ 1e-4); s = solve seconds (upload and projection apart)")
print(f"{'d':>3} {'data':>8} {'pair':>8} {'blur':>5} {'epsilon':>10} {'ms cost':>14} {'dense cost':>14} {'rel':>9} "
      f"{'ms err':>9} {'dense err':>9} {'ms it':>6} {'dense it':>8} {'ms s':>8} {'dense s':>8} {'dense/ms':>8}")
for case in cases:
    d, data, blur, pair = (case.split(":") + [default_pair])[:4]
    ms, why_ms = load(os.path.join(out, f"{d}-{data}-{blur}-{pair}-on"))
    de, why_de = load(os.path.join(out, f"{d}-{data}-{blur}-{pair}-off"))
    if ms is None or de is None:
        print(f"{d:>3} {data:>8} {pair:>8} {blur:>5} multiscale: {why_ms or 'ok'}; dense: {why_de or 'ok'}")
        continue
    rel = abs(ms["dual_cost"] - de["dual_cost"]) / abs(de["dual_cost"])
    mark = lambda r: "" if r["converged"] else "*"
    print(f"{d:>3} {data:>8} {pair:>8} {blur:>5} {ms['final_epsilon']:>10.4g} {ms['dual_cost']:>14.9g} "
          f"{de['dual_cost']:>14.9g} {rel:>9.2e} {ms['marginal_error']:>9.2e} {de['marginal_error']:>9.2e} "
          f"{str(ms['iterations']) + mark(ms):>6} {str(de['iterations']) + mark(de):>8} {ms['solve_s']:>8.2f} "
          f"{de['solve_s']:>8.2f} {de['solve_s'] / ms['solve_s']:>7.2f}x")
    print(f"{'':>28} primal {ms['primal_cost']:.9g} / {de['primal_cost']:.9g}; multiscale used: "
          f"{ms['multiscale']['used']}, peak device memory {ms['device_peak_bytes'] / 2**30:.2f} / "
          f"{de['device_peak_bytes'] / 2**30:.2f} GiB")
print("* = not converged (iteration budget): the cost difference then does not test the target")
PY
if [[ $EVAL == 1 ]]; then
  for c in $CASES; do
    IFS=: read -r d data blur pair <<< "$c"
    pair=${pair:-$PAIR}
    for ms in on off; do
      [[ -f $OUTDIR/$d-$data-$blur-$pair-$ms/potentials/solve.json ]] || continue
      echo "== exact evaluation, d = $d, $data / $pair, multiscale $ms" >&2
      "$python" "$here/multiscale_peers.py" evaluate "$OUTDIR/$d-$data-$blur-$pair-points" \
        "$OUTDIR/$d-$data-$blur-$pair-$ms/potentials" --eval full | tee "$OUTDIR/$d-$data-$blur-$pair-$ms/eval.json"
    done
  done
fi
