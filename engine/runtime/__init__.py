"""Running the model: sequences, the one decode loop, the runner and its pass plans, sampling, sessions and their caches."""
