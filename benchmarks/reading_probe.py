"""Experiment: can a policy of the demo's shape learn to *read* a statement in a warm-start budget? It builds demo
policies (``build_demo_policy``: the recipe every demo policy goes through) on synthetic statements at three levels
and scores each greedily, by exact match, on 30 statements it never saw:

- ``one_line``: one line item, one value asked; the answer copies the only number there is.
- ``four_lines``: four line items (as in ``finance_facts``: "Net income", asked as ``"net_income"``), one asked;
  the answer must find the line whose item is the key and copy its number (associative recall).
- ``four_lines_key_spelling``: the same with each line spelled as its key (``- net_income: 1821.4``), so the key's
  tokens appear verbatim in the line to find.
- ``quoted``, ``colon_quoted``, ``table_quoted``: four line items (``- Net income 1821.4``, ``- Net income: 1821.4``,
  or table rows ``| Net income | 1821.4 | 1700.2 |`` under a year header) and an answer that first quotes the line
  of the item asked, then gives the JSON object (the value is then copied from the quote, the only number there).
  To quote, the policy writes the item's name and must continue it with what followed that name in the statement:
  copying by content (an induction head), where ``four_lines`` asks it to match a name and copy from elsewhere.
- ``finance_facts``: the ``finance_facts`` suite itself: its 160 train statements and ``--warm-up`` more (the
  generator's ``warm_up_statements``), each answered by ``worked_reference`` (the asked items' lines quoted, then the
  JSON object), scored on the 48 eval statements by the suite's own check (``numeric.score_on_host``: every field and
  formula right), plus the fraction of fields right.

``--drills N`` adds N copy drills to each level's training set: 2-5 random lines of the level's own line format after
"Copy these lines:", the answer the same lines, every answer token a content copy; the report also scores 30 unseen
drills.

    python benchmarks/reading_probe.py                                # 2000 steps, batch 8: ~6 min on 2 cores
    python benchmarks/reading_probe.py --steps 2000 --batch 32 --levels four_lines
    python benchmarks/reading_probe.py --steps 2000 --batch 32 --levels four_lines --shape 256,768,4,4  # wider, deeper
    python benchmarks/reading_probe.py --steps 3000 --batch 32 --levels quoted --train 8000 --drills 8000
    python benchmarks/reading_probe.py --steps 3000 --batch 32 --levels finance_facts --warm-up 2000 --drills 4000

It measures why the finance and scene suites earn nothing at the demo size (docs/multi-domain.md): copying from a
fixed place is learnt within a few hundred steps, finding which line to copy from is not, unless copy drills teach
copying by content first and the answer quotes its line before it answers. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time

from posttrain.config import DemoPolicyConfig
from posttrain.envs.generators.common import copy_drill, copy_drills
from posttrain.training.demo_policy import build_demo_policy

ITEMS = ("Revenue", "Cost of sales", "Cash", "Debt", "Capital spending", "Operating cash flow", "Net income",
         "Inventory")
LEVELS = ("one_line", "four_lines", "four_lines_key_spelling", "quoted", "colon_quoted", "table_quoted",
          "finance_facts")
QUOTED_LINES = {"quoted": "- {item} {value}", "colon_quoted": "- {item}: {value}",
                "table_quoted": "| {item} | {value} | {prior} |"}
TABLE_HEAD = "| Item | 2023 | 2022 |\n|---|---|---|\n"
SHAPE = ("hidden_size", "intermediate_size", "num_layers", "num_heads")


def key(item: str) -> str:
    return item.lower().replace(" ", "_")


def figure(rng: random.Random) -> str:
    return f"{rng.randint(10, 1999)}.{rng.randint(0, 9)}"


def statement(level: str, rng: random.Random) -> tuple[str, str]:
    """One ``(prompt, reference)`` pair of ``level``, values ``10.0``..``1999.9``.

    >>> prompt, reference = statement("one_line", random.Random(0))
    >>> reference.startswith('{"') and prompt.count("\\n- ") == 2   # the line item and the key asked
    True
    >>> prompt, reference = statement("quoted", random.Random(0))
    >>> quote, answer, _ = reference.split("\\n")
    >>> quote in prompt and answer.endswith(quote.split()[-1] + "}")   # the line asked, then its value in JSON
    True
    """
    if level in QUOTED_LINES:
        return quoted_statement(level, rng)
    items = rng.sample(ITEMS, 1 if level == "one_line" else 4)
    values = {item: figure(rng) for item in items}
    label = key if level == "four_lines_key_spelling" else str
    asked = rng.choice(items)
    prompt = ("Results of Blue Media for fiscal 2023 (USD millions):\n"
              + "".join(f"- {label(item)}: {values[item]}\n" for item in items)
              + "Answer with one JSON object with exactly these keys, plain numbers:\n"
              + f'- "{key(asked)}": {asked.lower()} in 2023\n')
    return prompt, f'{{"{key(asked)}": {values[asked]}}}\n'


def quoted_statement(level: str, rng: random.Random) -> tuple[str, str]:
    """A pair of a quoting level: four lines in ``QUOTED_LINES[level]``'s format, the answer the asked one's line
    (without a list dash), then the JSON object."""
    items = rng.sample(ITEMS, 4)
    values = {item: (figure(rng), figure(rng)) for item in items}  # the year asked, the year before
    lines = {item: QUOTED_LINES[level].format(item=item, value=values[item][0], prior=values[item][1])
             for item in items}
    asked = rng.choice(items)
    head = TABLE_HEAD if level == "table_quoted" else ""
    prompt = ("Results of Blue Media for fiscal 2023 (USD millions):\n" + head
              + "".join(lines[item] + "\n" for item in items)
              + "Answer with one JSON object with exactly these keys, plain numbers:\n"
              + f'- "{key(asked)}": {asked.lower()} in 2023\n')
    return prompt, f'{lines[asked].removeprefix("- ")}\n{{"{key(asked)}": {values[asked][0]}}}\n'


def drill(level: str, rng: random.Random) -> tuple[str, str]:
    """A copy drill in ``level``'s line format: 2-5 random lines, to be copied as they are.

    >>> prompt, reference = drill("quoted", random.Random(0))
    >>> prompt.endswith("Copy:\\n" ) and prompt.count(reference) == 1
    True
    """
    line = QUOTED_LINES.get(level, "- {item}: {value}")
    return copy_drill([line.format(item=rng.choice(ITEMS), value=figure(rng), prior=figure(rng))
                       for _ in range(rng.randint(2, 5))])


def finance_facts_data(warm_up: int, drills: int) -> tuple[list[tuple[str, str]], list, list[tuple[str, str]]]:
    """The ``finance_facts`` level: training pairs (``finance_facts.warm_start_pairs``: the suite's train statements
    and ``warm_up`` more, with worked references, plus ``drills`` copy drills of their item lines), the eval specs,
    and 30 unseen drills."""
    from posttrain.envs.generators import finance_facts as ff

    lines = ff.item_lines(ff.warm_start_statements(warm_up))
    unseen = [copy_drills(lines, 1, -1 - n)[0] for n in range(30)]
    evals = [ff.to_spec(s) for s in ff.statements() if s.split == "eval"]
    return ff.warm_start_pairs(warm_up, drills), evals, unseen


def completions(policy_dir: str, prompts: list[str], max_new_tokens: int = 64) -> list[str]:
    """The policy's greedy completion of each prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    model = AutoModelForCausalLM.from_pretrained(policy_dir).eval()
    out = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            tokens = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False,
                                    eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
        out.append(tokenizer.decode(tokens[0][ids.shape[1]:], skip_special_tokens=True))
    return out


def exact_matches(policy_dir: str, pairs: list[tuple[str, str]]) -> int:
    """How many of ``pairs`` the policy completes greedily into exactly the reference."""
    got = completions(policy_dir, [prompt for prompt, _ in pairs])
    return sum(text.strip() == reference.strip() for text, (_, reference) in zip(got, pairs))


def finance_scores(policy_dir: str, specs: list) -> tuple[int, float]:
    """How many eval envs the policy's greedy answer passes (``numeric.score_on_host``), and the fields right."""
    from posttrain.envs.verifiers.numeric import extract_solution, score_on_host

    verdicts = [score_on_host(spec, extract_solution(text))
                for spec, text in zip(specs, completions(policy_dir, [spec.prompt for spec in specs], 128))]
    return sum(v.passed for v in verdicts), sum(v.signals.get("fields", 0.0) for v in verdicts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000, help="SFT steps of each build")
    parser.add_argument("--batch", type=int, default=8, help="SFT batch (the multi-domain recipe's: 8)")
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument("--train", type=int, default=8000, help="distinct training statements per level")
    parser.add_argument("--eval", type=int, default=30, help="held-out statements per level")
    parser.add_argument("--drills", type=int, default=0, help="copy drills added to each level's training set")
    parser.add_argument("--warm-up", type=int, default=2000,
                        help="finance_facts: warm-up statements besides the suite's")
    parser.add_argument("--shape", default="",
                        help="model shape over the demo's, as hidden,intermediate,layers,heads (e.g. 256,768,4,4)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.shape.split(",")] if args.shape else []
    if sizes and len(sizes) != len(SHAPE):
        parser.error(f"--shape: {args.shape!r} needs {len(SHAPE)} numbers, {','.join(SHAPE)}")
    shape = dict(zip(SHAPE, sizes))
    cfg = DemoPolicyConfig(vocab_size=1024, max_position_embeddings=1024, sft_steps=args.steps,
                           sft_batch_size=args.batch, **shape)
    result: dict = {"steps": args.steps, "batch": args.batch, "drills": args.drills,
                    "shape": {k: getattr(cfg, k) for k in SHAPE}, "levels": {}}
    for level in args.levels.split(","):
        if level not in LEVELS:
            parser.error(f"--levels: {level!r} is not one of {', '.join(LEVELS)}")
        if level == "finance_facts":
            result["levels"][level] = finance_facts_level(cfg, args.warm_up, args.drills)
            print(f"{level:>24}: {result['levels'][level]}", flush=True)
            continue
        drills = random.Random(f"drills-{level}")
        train = ([statement(level, random.Random(n)) for n in range(args.train)]
                 + [drill(level, drills) for _ in range(args.drills)])
        held_out = [statement(level, random.Random(-1 - n)) for n in range(args.eval)]
        began = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="reading-probe-") as out:
            build_demo_policy(out, cfg, train)
            built = time.perf_counter() - began
            right = exact_matches(out, held_out)
            copied = exact_matches(out, [drill(level, random.Random(-1 - n)) for n in range(args.eval)]) \
                if args.drills else None
        result["levels"][level] = {"exact": f"{right}/{len(held_out)}", "exact_rate": round(right / len(held_out), 3),
                                   "build_s": round(built, 1)}
        if copied is not None:
            result["levels"][level]["drills_exact"] = f"{copied}/{args.eval}"
        print(f"{level:>24}: {right}/{len(held_out)} exact after {args.steps} steps of {args.batch} "
              f"({built:.0f} s)" + (f", drills {copied}/{args.eval}" if args.drills else ""), flush=True)
    print(json.dumps(result))


def finance_facts_level(cfg: DemoPolicyConfig, warm_up: int, drills: int) -> dict:
    """Build on the ``finance_facts`` level's data and score it on the suite's eval split."""
    pairs, specs, unseen = finance_facts_data(warm_up, drills)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="reading-probe-") as out:
        build_demo_policy(out, cfg, pairs)
        built = time.perf_counter() - began
        passed, fields = finance_scores(out, specs)
        copied = exact_matches(out, unseen) if drills else None
    report = {"passed": f"{passed}/{len(specs)}", "pass_rate": round(passed / len(specs), 3),
              "fields_right": round(fields / len(specs), 3), "warm_up": warm_up, "build_s": round(built, 1)}
    return report | ({"drills_exact": f"{copied}/{len(unseen)}"} if drills else {})


if __name__ == "__main__":
    main()
