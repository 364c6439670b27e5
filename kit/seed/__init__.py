"""The kit's tiny seed: `kit.seed.build` trains it and writes a Hugging Face Llama directory."""
