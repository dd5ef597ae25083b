"""The recipe that makes the default dLLM: self-distillation data, LoRA block-diffusion training."""
