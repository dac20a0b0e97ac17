"""Evaluation of a policy version: greedy (and sampled) eval of single-turn envs (``greedy``) and of agent envs
(``agent``), the ``EvalResults`` table with its assertions judged (``results``), pass@k, stratified tables, the
regression gate's comparison and the HTML report's rendering; logging any of it to MLflow is ``posttrain.tracking``'s.
"""
