"""Llama math on Hugging Face parameter names (layer 2: torch, no torch.distributed)."""
