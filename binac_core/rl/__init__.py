"""The RL algorithm: episodes, scored batches, losses and updates, methods, critic rewards, evaluation protocols."""
