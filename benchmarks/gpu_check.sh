#!/usr/bin/env bash
# The prepared GPU check (issue 30): under 8 minutes on one GPU. Run it the moment a GPU is lent, and put its
# numbers in docs/training_results.md ("On a GPU") with the card named.
#
#   benchmarks/gpu_check.sh                 # on a machine with CUDA
#   benchmarks/gpu_check.sh --device cpu    # the dry run: every part at tiny sizes on the CPU (a slow test runs it)
#
# 1. CUDA against CPU: one fixed-seed private step (benchmarks/gpu_equivalence.py);
# 2. throughput: benchmarks/train_speed.py --device cuda (tasks/s per algorithm, ratios, the 2,000 tasks/s target);
# 3. the seed's Omniglot plan, task level (examples/train_omniglot_5way_paper_task.toml: dp-maml.txt's lot of
#    1,600, z = 1, 250 steps), for as many steps as fit in OMNIGLOT_SECONDS (default 200), first order, then
#    the accuracy on the 20 official one-shot runs and the certified epsilons of the steps run.
#
# Environment: RESULTS (results folder; default a new temporary folder), METADP_DATA (the Omniglot zips; default
# ../shared/data/omniglot), PYTHON (default python3), OMNIGLOT_SECONDS. Needs torch, numpy, scipy, mpmath and
# tqdm only: it runs from the checkout (PYTHONPATH), nothing is installed. On the lent device machine the
# ../shared folder does not travel: the data go in the ignored folder .gpu_data of the checkout, carried:
#
#   mkdir -p .gpu_data && cp ../shared/data/omniglot/* .gpu_data/      # here, once
#   device run, carry [".gpu_data"], timeout_s 540:
#   export METADP_DATA=$PWD/.gpu_data RESULTS=/tmp/gpu; bash benchmarks/gpu_check.sh 2>&1 | tee $OUT/gpu_check.log;
#   cp /tmp/gpu/*.json /tmp/gpu/omniglot/*.json $OUT/      # (the device returns at most 8 files from $OUT)
set -euo pipefail
cd "$(dirname "$0")/.."
device=cuda
if [ "${1:-}" = "--device" ]; then device=${2:?--device needs a value}; fi
python=${PYTHON:-python3}
out=${RESULTS:-$(mktemp -d)}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 METADP_HEARTBEAT_SECONDS=0
start=$SECONDS
if [ "$device" = cpu ]; then  # the dry run: the same commands at sizes a CPU runs in a minute or two
  speed=(--steps 3 --repeats 1 --meta-batch 8 --only "MAML, first order;DP-MAML task-level, first order")
  lot=8; budget=${OMNIGLOT_SECONDS:-20}
else
  speed=(--steps 20 --repeats 2)
  lot=1600; budget=${OMNIGLOT_SECONDS:-200}
fi

echo "== 1. $device against cpu: one fixed-seed private step"
"$python" benchmarks/gpu_equivalence.py --device "$device" --json "$out/equivalence.json"

echo "== 2. throughput ($((SECONDS - start)) s so far)"
"$python" benchmarks/train_speed.py --device "$device" "${speed[@]}" --json "$out/train_speed.json"

echo "== 3. Omniglot, task-level DP-MAML at the paper's lot ($((SECONDS - start)) s so far)"
plan=examples/train_omniglot_5way_paper_task.toml
sed -e "s/^batch_size = 1600/batch_size = $lot/" -e "s/^steps = 250/steps = 3/" "$plan" > "$out/probe.toml"
probe_start=$SECONDS
"$python" -m metadp train dp-maml --plan "$out/probe.toml" --data omniglot --first-order --device "$device" \
  --eval-tasks 10 --out "$out/probe" > "$out/probe.txt" 2>&1
probe=$((SECONDS - probe_start))
# steps that fit: from the measured task-level first-order rate (at a smaller lot: an under-estimate of the rate
# at 1,600), else from the probe's whole time (setup and evaluation included: an over-estimate of a step)
steps=$("$python" - "$out/train_speed.json" "$budget" "$lot" "$probe" <<'EOF'
import json, sys
speed, budget, lot, probe = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
rates = [c["tasks_per_second"] for c in json.load(open(speed))["cases"] if c["name"] == "DP-MAML task-level, first order"]
per_step = lot / rates[0] if rates else max(probe, 1.0) / 3
print(max(1, min(250, int(budget / per_step))))
EOF
)
echo "probe: 3 steps in $probe s (setup and evaluation included); running $steps of the plan's 250 steps"
sed -e "s/^batch_size = 1600/batch_size = $lot/" -e "s/^steps = 250/steps = $steps/" "$plan" > "$out/omniglot.toml"
"$python" -m metadp train dp-maml --plan "$out/omniglot.toml" --data omniglot --first-order --device "$device" \
  --out "$out/omniglot" 2>&1 | tr '\r' '\n' | grep -v 'it/s' | tee "$out/omniglot.txt"
"$python" - "$out" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
report = json.loads((out / "omniglot" / "privacy_report.json").read_text())
score = json.loads((out / "omniglot" / "evaluation.json").read_text())
print(f"Omniglot: {report['steps_done']} steps; accuracy {score['mean']:.3f} +- {score['half_width_95']:.3f} "
      f"(95%, {score['tasks']} tasks of the 20 official one-shot runs); task epsilon <= {float(report['epsilon']):.4g}, "
      + "; ".join(f"{o['view']} <= {float(o['epsilon']):.4g}" for o in report["other_units"])
      + f" (upper bounds, add/remove neighbours, Poisson task sampling) at delta {report['delta']:g}")
EOF
echo "== done in $((SECONDS - start)) s; results in $out"
