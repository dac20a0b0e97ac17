"""The ``posttrain`` command: utilities around the Flyte workflows.

    posttrain demo-policy [OUT]        build the seeded demo policy (tokenizer + small Llama, SFT warm start)
    posttrain admit SUITE [--out DIR]  run admission on a suite folder; writes report.parquet/.html, prints a summary
    posttrain doctor                   check that bwrap, dockerd + sandbox image, vLLM and DeepSpeed are usable

Example:
    $ posttrain admit posttrain/envs/suites/demo_python --out /tmp/admission
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from posttrain.config import SandboxConfig, default_policy_dir


def _demo_policy(args) -> int:
    from posttrain.training.demo_policy import main_demo_policy

    print(main_demo_policy(args.out))
    return 0


def _admit(args) -> int:
    from posttrain.admission import admit
    from posttrain.sandbox import make_sandbox

    cfg = SandboxConfig(backend=args.backend)
    box = make_sandbox(cfg)
    try:
        result = admit(args.suite, box, cfg)
    finally:
        box.close()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result.report.to_parquet(out / "report.parquet", index=False)
    (out / "report.html").write_text(result.report.to_html(index=False))
    failed = result.report[~result.report["passed"]]
    for row in failed.itertuples():
        print(f"REJECTED {row.env_id} [{row.check}] {row.detail}")
    total = result.report["env_id"].nunique()
    print(f"{len(result.admitted)}/{total} envs admitted; report in {out}")
    return 0


def _doctor(args) -> int:
    checks = {"bwrap": shutil.which("bwrap") is not None}
    try:
        import docker

        client = docker.from_env()
        client.ping()
        client.images.get(SandboxConfig().docker_image)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="posttrain", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo-policy", help="build the demo policy")
    p.add_argument("out", nargs="?", default=default_policy_dir())
    p.set_defaults(func=_demo_policy)
    p = sub.add_parser("admit", help="admit a suite")
    p.add_argument("suite")
    p.add_argument("--out", default="admission")
    p.add_argument("--backend", default="bwrap", choices=["bwrap", "docker"])
    p.set_defaults(func=_admit)
    p = sub.add_parser("doctor", help="check the real components are usable")
    p.set_defaults(func=_doctor)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
