"""The seed papers' experiments, each with the paper's numbers, runnable in the simulator."""
