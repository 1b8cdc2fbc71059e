"""The RL algorithm: episodes, scored batches, losses and updates, methods, evaluation protocols."""
