"""Rollout: the ``RolloutEngine`` protocol and its vLLM engine (in-process, in its own host process, or live: one per
process, swapped to each new policy version in place), single-turn collection of trajectories, dynamic sampling,
and the staleness bound between the policy that sampled and the one being trained.
"""
