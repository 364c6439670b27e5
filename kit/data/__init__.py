"""Layer 1 data: generated task families, conversation sources, chat formatting and preparation (no torch)."""
