"""Tools around the engine: benchmarks, the held-out eval, load tests and the soak, the llama.cpp peer."""
