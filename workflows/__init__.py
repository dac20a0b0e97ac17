"""Flyte workflows and launch plans of posttrain."""
