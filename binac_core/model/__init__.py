"""The model: base models (tiny pretraining, smol, hub), tokenizer, the LoRA policy, generation backends."""
