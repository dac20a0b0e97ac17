"""Training: the RL algorithms (advantages, losses, KL; ``algorithms``, registered by name), the update's samples
and their batching, per-token log-probabilities, the DeepSpeed trainer (and the live one kept between updates),
checkpoints, and the demo policy recipe.
"""
