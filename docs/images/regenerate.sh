#!/usr/bin/env bash
# Regenerates every image under docs/images from the shipped diagrams and profiles.
# Run from the repository root after `pip install .`:  bash docs/images/regenerate.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
napkin() { python -m analyzer "$@"; }
napkin plot transfers attention --gpu h100 --gpu a100 --gpu t4 --dtype fp16 --dtype fp8 -o docs/images/transfers-attention.png
napkin plot roofline attention --gpu h100 --gpu a100 --gpu t4 --gpu h200 -o docs/images/roofline-attention.png
napkin analyze causal_attention --gpu h100 --gpu a100 --set q=1024..32768 --plot docs/images/sizes-causal-attention.png >/dev/null
napkin plot schedule attention --gpu h100 --config fa3_fp16_intra --overhead 0.66 -o docs/images/schedule-fa3-fp16-intra.png
napkin plot schedule attention --gpu h100 --config fa3_fp8_inter --overhead 0.66 -o docs/images/schedule-fa3-fp8-inter.png
napkin plot schedule attention --gpu h100 --config napkin_hopper --overhead 0.5 -o docs/images/schedule-napkin-hopper.png
napkin draw attention -o docs/images/draw-attention.png
napkin draw gqa -o docs/images/draw-gqa.png
