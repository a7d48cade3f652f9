"""Real models' attention shapes at inference, the short problems issue 34 names and more: bench/frontier.py
times REAL_SHAPES beside the peers, bench/hopper_sweep.py every configuration at them (--parts real, which
`napkin calibrate --kernel hopper` trains on beside the grid) and at SHORT_SHAPES (--parts short, held
out of the fit)."""

from __future__ import annotations

# name -> (batch, heads, query length, key length, head dim): real models' attention at inference, the short
# shapes issue 34 names (bench/frontier.py times them beside the peers, bench/hopper_sweep.py --parts real every
# configuration at them)
REAL_SHAPES = {"ViT-L/14 at 336 px, batch 8": (8, 16, 577, 577, 64),
               "BERT-large, batch 8": (8, 16, 512, 512, 64),
               "SDXL cross-attention, batch 2": (2, 10, 4096, 77, 64)}
# more short shapes, none of them the fit's (bench/hopper_sweep.py --parts short): what the model, fitted on
# REAL_SHAPES beside the grid, is held against at short problems it did not see
SHORT_SHAPES = {"ViT-B/16 at 224 px, batch 32": (32, 12, 197, 197, 64),
                "BERT-base at 128 tokens, batch 32": (32, 12, 128, 128, 64),
                "Whisper encoder, batch 4": (4, 20, 1500, 1500, 64),
                "SDXL cross-attention at 32 x 32 latents, batch 2": (2, 20, 1024, 77, 64),
                "cross-attention at head dim 128, batch 8": (8, 16, 1024, 77, 128)}
