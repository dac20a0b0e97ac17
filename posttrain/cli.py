"""The ``posttrain`` command: utilities around the Flyte workflows.

    posttrain demo-policy [OUT]        build the seeded demo policy (tokenizer + small Llama, SFT warm start)
    posttrain admit SUITE [--out DIR]  run admission on a suite folder; writes report.parquet/.html and check_stats,
                                       prints per-check statistics and every rejection (see --help for the checks)
    posttrain import-jsonl FILE OUT    import HumanEval/MBPP-style JSONL into a suite folder of env specs
    posttrain reason-codes [--write F] print every admission reason code as a Markdown table, or rewrite F's block
    posttrain config-docs [--write F]  print every config field as Markdown tables, or rewrite F's block
    posttrain doctor                   check that bwrap, dockerd + sandbox image, vLLM and DeepSpeed are usable
    posttrain replay RUN_ID [--episode GROUP_ID] [--sample N]
                                       an evaluated version's failed agent eval episodes, or one step by step:
                                       messages, tool calls, outputs, workspace diffs (MLFLOW_TRACKING_URI)

Example:
    $ posttrain admit posttrain/envs/suites/demo_python --out /tmp/admission
"""

from __future__ import annotations

import argparse
import shutil
import sys

from posttrain.config import DEMO_AGENT_POLICIES, DEMO_AGENT_POLICY, SandboxConfig, default_agent_policy_dir, \
    default_policy_dir
from posttrain.envs.importers.jsonl import add_arguments as add_jsonl_arguments
from posttrain.envs.importers.jsonl import import_jsonl_command
from posttrain.sandbox import BACKENDS


def _demo_policy(args) -> int:
    from posttrain.training.demo_policy import main_demo_policy

    print(main_demo_policy(args.out))
    return 0


def _agent_policy(args) -> int:
    from posttrain.agent.warm_start import RECIPES, main_agent_policy

    print(main_agent_policy(args.out or default_agent_policy_dir(args.recipe), RECIPES[args.recipe]))
    return 0


def _admission_config(args):
    """The ``AdmissionConfig`` of ``posttrain admit``: ``--config`` JSON first, then the individual flags."""
    import json
    from dataclasses import fields, replace

    from posttrain.config import AdmissionConfig

    known = {f.name for f in fields(AdmissionConfig)}
    overrides = json.loads(args.config) if args.config else {}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise SystemExit(f"posttrain admit: --config: unknown AdmissionConfig fields {unknown}")
    flags = {"checks": args.checks.split(",") if args.checks else None, "repeats": args.repeats, "k": args.k,
             "weak_policy": args.weak, "strong_policy": args.strong, "learnability_policy": args.learnability,
             "filter_learnability": args.filter_learnability or None, "max_mutants": args.max_mutants,
             "mutation_threshold": args.mutation_threshold, "batch_concurrency": args.concurrency}
    overrides.update({k: v for k, v in flags.items() if v is not None})
    return replace(AdmissionConfig(), **overrides)


def _admit(args) -> int:
    from posttrain.admission import admit, write_report
    from posttrain.admission.report import rejection_reasons, stats_text
    from posttrain.sandbox import make_sandbox

    from posttrain.tracking.policies import resolved

    cfg = resolved(_admission_config(args))
    sandbox_cfg = SandboxConfig(backend=args.backend)
    box = make_sandbox(sandbox_cfg)
    try:
        result = admit(args.suite, box, sandbox_cfg, cfg, progress=not args.no_progress)
    finally:
        box.close()
    paths = write_report(args.out, result.details, result.stats, title=args.suite, wall_s=result.wall_s)
    failed = result.details[result.details["status"].isin(["fail", "infra"])]
    for row in failed.itertuples():
        print(f"REJECTED {row.env_id} [{row.check}] {row.detail}")
    print("\nper-check statistics:")
    print(stats_text(result.stats))
    reasons = rejection_reasons(result.details)
    if len(reasons):
        print("\nrejections by reason:")
        print(reasons.to_string(index=False))
    print(f"\n{len(result.admitted)}/{result.envs} envs admitted in {result.wall_s:.1f} s; "
          f"report in {paths['html'].parent}")
    return 0


def _reason_codes(args) -> int:
    from posttrain.admission.reasons import markdown_table, write_table

    if not args.write:
        print(markdown_table())
    for path in args.write:
        print(f"{path}: {'updated' if write_table(path) else 'up to date'}")
    return 0


def _config_docs(args) -> int:
    from posttrain.config_docs import markdown_tables, write_tables

    if not args.write:
        print(markdown_tables())
    for path in args.write:
        print(f"{path}: {'updated' if write_tables(path) else 'up to date'}")
    return 0


def _doctor(args) -> int:
    checks = {"bwrap": shutil.which("bwrap") is not None}
    try:
        import docker

        client = docker.from_env()
        client.ping()
        client.images.get(SandboxConfig().docker.image)
        checks["docker + sandbox image"] = True
    except Exception as exc:  # any failure here is what the doctor reports
        checks["docker + sandbox image"] = False
        print(f"docker: {exc}")
    for module in ("vllm", "deepspeed", "flytekit", "mlflow"):
        try:
            __import__(module)
            checks[module] = True
        except Exception as exc:  # an import failure is a finding, not a crash
            checks[module] = False
            print(f"{module}: {exc}")
    for name, ok in checks.items():
        print(f"{'ok ' if ok else 'MISSING'} {name}")
    return 0 if all(checks.values()) else 1


def _replay(args) -> int:
    from posttrain.tracking.episode_replay import load_tables, replay_lines

    print("\n".join(replay_lines(load_tables(args.run_id), args.run_id, args.episode, args.sample)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="posttrain", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo-policy", help="build the demo policy")
    p.add_argument("out", nargs="?", default=default_policy_dir())
    p.set_defaults(func=_demo_policy)
    p = sub.add_parser("agent-policy", help="build a demo agent policy (warm-started on oracle episodes, 15-80 min)")
    p.add_argument("out", nargs="?", help="where (default: .posttrain/agent-policy, agent-long-policy or "
                                          "multi-policy)")
    p.add_argument("--recipe", default=DEMO_AGENT_POLICY, choices=sorted(DEMO_AGENT_POLICIES),
                   help="demo-agent: agent_repo and its warm-up envs; demo-agent-long: the regression hunts and "
                        "warm-up hunts of other functions, under a 384-token context budget; demo-multi: the "
                        "terminal tasks' episodes, a quarter of the code train pairs, finance statements and scene "
                        "layouts answered by worked references, and copy drills, after copy drills over fresh lines")
    p.set_defaults(func=_agent_policy)
    p = sub.add_parser("admit", help="admit a suite: per-env verdicts with reason codes, per-check statistics")
    p.add_argument("suite")
    p.add_argument("--out", default="admission", help="where report.parquet, report.html, check_stats.* go")
    p.add_argument("--backend", default=SandboxConfig().backend, choices=BACKENDS)
    p.add_argument("--config", help="AdmissionConfig fields as JSON, e.g. '{\"repeats\": 5}'")
    p.add_argument("--checks", help="comma-separated checks to run (default: all six)")
    p.add_argument("--repeats", type=int)
    p.add_argument("--k", type=int, help="samples per env and policy")
    p.add_argument("--weak", help="weak policy: identity, noop, reference, noisy:P or a policy reference (demo, "
                                  "models:/posttrain-policy@champion, a checkpoint dir)")
    p.add_argument("--strong", help="strong policy (same choices)")
    p.add_argument("--learnability", help="current policy whose pass rate must be in (0, 1)")
    p.add_argument("--filter-learnability", action="store_true", help="reject envs the learnability policy "
                                                                      "always or never solves")
    p.add_argument("--max-mutants", type=int)
    p.add_argument("--mutation-threshold", type=float)
    p.add_argument("--concurrency", type=int, help="sandbox runs of one batch in flight")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_admit)
    p = sub.add_parser("import-jsonl", help="import HumanEval/MBPP-style JSONL into a suite")
    add_jsonl_arguments(p)
    p.set_defaults(func=import_jsonl_command)
    p = sub.add_parser("reason-codes", help="the admission reason codes as a Markdown table")
    p.add_argument("--write", action="append", default=[], metavar="FILE",
                   help="rewrite the reason-codes block of FILE (e.g. docs/admission.md) instead of printing")
    p.set_defaults(func=_reason_codes)
    p = sub.add_parser("config-docs", help="every config field (type, default, meaning) as Markdown tables")
    p.add_argument("--write", action="append", default=[], metavar="FILE",
                   help="rewrite the config-docs block of FILE (e.g. docs/configuration.md) instead of printing")
    p.set_defaults(func=_config_docs)
    p = sub.add_parser("doctor", help="check the real components are usable")
    p.set_defaults(func=_doctor)
    p = sub.add_parser("replay", help="an agent eval episode step by step, from an iteration run's MLflow tables")
    p.add_argument("run_id", help="the MLflow run of an evaluated version (a child of the loop's run)")
    p.add_argument("--episode", help="the episode's group id (eval-v<k>/<env_id>); without it, the failed ones")
    p.add_argument("--sample", type=int, default=0, help="the episode's sample index")
    p.set_defaults(func=_replay)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
