#!/bin/bash
# Issue 22 beside the peer: flashot's multiscale solve and FlashSinkhorn 0.4.1's SamplesLoss(backend="multiscale")
# on the same 3-D points, weights and ε, both results judged by one exact evaluator (multiscale_peers.py: residuals
# ‖P1 − a‖₁, ‖Pᵀ1 − b‖₁ and dual costs from streamed fp32 blocks with fp64 sums). For each N in SIZES:
#   1. flashot bench --end-to-end --multiscale on (sphere / deformed by default, 1 % blur, tolerance 1e-2,
#      alternating with auto over-relaxation), saving the points (--save-points) and the potentials
#      (--save-potentials); its solve seconds exclude the upload and the barycentric projection;
#   2. the peer on the saved points in a child process (a warm-up solve first, which compiles its Triton kernels:
#      reported apart; a refusal, out-of-memory, crash or PEER_TIMEOUT is recorded as the result), its tol half of
#      flashot's tolerance (max(row, col) ≤ tol/2 ⇒ row + col ≤ tol; PEER_TOL overrides);
#   3. the evaluator on both: every row and column when N·N ≤ 1.01e12 (EVAL=full), else 65536 sampled rows and
#      columns with standard errors (EVAL=sampled; EVAL=none skips it; 10^7 in full is 10^14 entries per side).
# flashot runs first for every N: a peer cut short by a time limit still leaves flashot's figures.
#
# usage: BUILD=build-dir (apps/flashot in it) WHEELS=DIR (or PEERS_PYTHONPATH=dirs) [SIZES=1000000,10000000]
#        [DATA=sphere] [PAIR=deformed] [BLUR=0.01] [TOL=1e-2] [PEER_TOL=0] [EVAL=auto] [SAMPLES=65536]
#        [PEER_TIMEOUT=600] [WARMUP=65536] [FLASHOT_ARGS="--scheme alternating"] [NO_PEER=0] [OUTDIR=out-ms]
#        multiscale.sh
#   DATA: sphere | bumpy | torus | mixture | uniform | clusters | normal (flashot bench --data, d = 3)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SIZES=${SIZES:-1000000,10000000} DATA=${DATA:-sphere} PAIR=${PAIR:-deformed} BLUR=${BLUR:-0.01} TOL=${TOL:-1e-2}
PEER_TOL=${PEER_TOL:-0} EVAL=${EVAL:-auto} SAMPLES=${SAMPLES:-65536} PEER_TIMEOUT=${PEER_TIMEOUT:-600}
WARMUP=${WARMUP:-65536} FLASHOT_ARGS=${FLASHOT_ARGS---scheme alternating} NO_PEER=${NO_PEER:-0}
OUTDIR=${OUTDIR:-out-ms} BACKEND=${BACKEND:-cuda}
flashot=${BUILD:?set BUILD (the build directory with apps/flashot)}/apps/flashot
[[ -x $flashot ]] || { echo "multiscale.sh: no $flashot" >&2; exit 2; }
# A packed build (scripts/pack-gpu-build.sh) brings libsleef and libgomp in BUILD/lib: for flashot only, not for
# the Python processes (torch loads its own).
flashot_env=()
[[ -d ${BUILD}/lib ]] && flashot_env=(env "LD_LIBRARY_PATH=$(cd "$BUILD/lib" && pwd):${LD_LIBRARY_PATH:-}")
mkdir -p "$OUTDIR"; OUTDIR=$(cd "$OUTDIR" && pwd)
python=${PYTHON:-python3}
peer_args=()
if [[ $NO_PEER == 1 ]]; then
  peer_args=(--no-peer)
elif [[ -n ${PEERS_PYTHONPATH:-} ]]; then
  export PYTHONPATH=$PEERS_PYTHONPATH:${PYTHONPATH:-}
else
  site=/tmp/flashot-peers-site
  rm -rf "$site" && mkdir -p "$site"
  "$python" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$site" \
    "${WHEELS:?set WHEELS (or PEERS_PYTHONPATH, or NO_PEER=1)}"/flash_sinkhorn-*.whl || exit 1
  export PYTHONPATH=$site:${PYTHONPATH:-}
fi
export PYTHONUNBUFFERED=1
runs=()
for n in ${SIZES//,/ }; do
  run=$OUTDIR/$DATA-$PAIR-$n
  rm -rf "$run" && mkdir -p "$run"
  echo "== flashot, n = m = $n, $DATA / $PAIR, blur $BLUR of the diameter, tolerance $TOL" >&2
  # shellcheck disable=SC2086  # FLASHOT_ARGS is a list of options
  if "${flashot_env[@]}" "$flashot" bench --end-to-end --n "$n" --d 3 --data "$DATA" --pair "$PAIR" \
       --blur-relative "$BLUR" --tolerance "$TOL" --multiscale on --backend "$BACKEND" $FLASHOT_ARGS \
       --save-points "$run/points" --save-potentials "$run/flashot" > "$run/flashot.json" 2> "$run/flashot.err"; then
    runs+=("$run")
    grep -o '"solve_s":[^,]*\|"iterations":[^,]*\|"marginal_error":[^,]*\|"converged":[^,]*' "$run/flashot.json" | \
      head -4 | tr '\n' ' ' >&2; echo >&2
  else
    echo "flashot failed at n = $n: $(tail -3 "$run/flashot.err")" >&2
  fi
done
[[ ${#runs[@]} -gt 0 ]] || { echo "multiscale.sh: no flashot run finished" >&2; exit 1; }
rm -f "$OUTDIR/results.jsonl"
"$python" "$here/multiscale_peers.py" compare "${runs[@]}" --results "$OUTDIR/results.jsonl" "${peer_args[@]}" \
  --peer-tol "$PEER_TOL" --peer-timeout "$PEER_TIMEOUT" --warmup "$WARMUP" --eval "$EVAL" --samples "$SAMPLES"
