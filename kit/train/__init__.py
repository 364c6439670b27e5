"""Training math: loss, per-parameter AdamW, canonical clipping, PowerSGD (layer 2)."""
