"""The model: the transformer, loading checkpoints and adapters, precision, int8 layers, the native extension, the KV cache."""
