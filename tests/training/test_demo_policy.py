"""The demo policy build is seeded and single-threaded: the same config gives byte-identical weights; its tokenizer,
trained on the train split, covers the eval split; a snapshot mid-build is a loadable policy and leaves the
build's weights unchanged; the copy phase is seeded and part of the config; batches grouped by length still see
every example once an epoch and pad far less than random ones."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

import hashlib
import json
from dataclasses import replace

from posttrain.config import DEMO_SUITE, DemoPolicyConfig
from posttrain.envs.suite import load_suite
from posttrain.training.checkpoints import check_policy_dir, policy_version
from posttrain.training.demo_policy import build_demo_policy, sft_batches, train_tokenizer

pytestmark = pytest.mark.integration


def _weights_sha(path) -> str:
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


@pytest.mark.parametrize("groups", [1, 4])
def test_sft_batches_see_every_example_once_an_epoch_and_grouping_cuts_padding(groups):
    import random

    import torch

    lengths = [random.Random(n).choice((20, 30, 400, 600)) for n in range(64)]
    batches = sft_batches(lengths, 8, groups, torch.Generator().manual_seed(0))
    epoch = [next(batches) for _ in range(8)]
    assert sorted(i for batch in epoch for i in batch) == list(range(64)) and {len(b) for b in epoch} == {8}
    padded = sum(8 * max(lengths[i] for i in batch) for batch in epoch)
    assert (padded < 1.5 * sum(lengths)) == (groups > 1)


def test_demo_policy_build_is_deterministic_and_loadable_and_snapshots_leave_it_unchanged(tmp_path):
    pairs = [(e.prompt, e.reference) for e in load_suite(DEMO_SUITE).envs if e.split == "train"]
    cfg = replace(DemoPolicyConfig(), sft_steps=4)
    first = build_demo_policy(tmp_path / "a", cfg, pairs)
    template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    second = build_demo_policy(tmp_path / "b", cfg, pairs, snapshots=[2], chat_template=template)
    assert _weights_sha(first) == _weights_sha(second)
    snapshot = tmp_path / "b-step2"
    assert check_policy_dir(snapshot) == snapshot and _weights_sha(snapshot) != _weights_sha(second)
    # the template is in every folder the build writes, the snapshot too: it serves agent episodes as it is
    assert [AutoTokenizer.from_pretrained(folder).chat_template for folder in (first, second, snapshot)] == \
        [None, template, template]
    assert build_demo_policy(tmp_path / "c", replace(cfg, sft_steps=2), pairs) and \
        _weights_sha(tmp_path / "c") != _weights_sha(snapshot)  # a snapshot is mid-schedule, not a shorter build
    assert check_policy_dir(first) == first
    assert policy_version(first) == 0
    other = build_demo_policy(tmp_path / "c", replace(cfg, seed=1), pairs)
    assert _weights_sha(other) != _weights_sha(first)


def test_copy_drills_are_seeded_and_part_of_the_build_config(tmp_path):
    """``copy_steps`` trains on fresh copy drills before SFT (``copy_share``: in each SFT batch too): the same config
    twice gives the same weights, other weights than the build without it, and a policy built without it is not
    taken for one built with it."""
    from posttrain.training.demo_policy import is_complete

    pairs = [(e.prompt, e.reference) for e in load_suite(DEMO_SUITE).envs if e.split == "train"][:40]
    cfg = replace(DemoPolicyConfig(), sft_steps=2, copy_steps=3, num_heads=4)
    first, second = (build_demo_policy(tmp_path / name, cfg, pairs) for name in ("a", "b"))
    plain = build_demo_policy(tmp_path / "c", replace(cfg, copy_steps=0), pairs)
    assert _weights_sha(first) == _weights_sha(second) != _weights_sha(plain)
    assert is_complete(first, cfg, pairs) and not is_complete(plain, cfg, pairs)
    assert AutoTokenizer.from_pretrained(first).get_vocab() == AutoTokenizer.from_pretrained(plain).get_vocab()
    # a policy built before the field existed (its meta lacks it) is the build with copy_steps 0, not a stale one
    meta_file = plain / "posttrain_policy.json"
    meta = json.loads(meta_file.read_text())
    del meta["demo_policy"]["copy_steps"]
    meta_file.write_text(json.dumps(meta))
    assert is_complete(plain, replace(cfg, copy_steps=0), pairs) and not is_complete(plain, cfg, pairs)
    # copy_share: fresh drills in every SFT batch as well, a build of its own
    shared = build_demo_policy(tmp_path / "d", replace(cfg, copy_share=0.5), pairs)
    assert _weights_sha(shared) not in {_weights_sha(first), _weights_sha(plain)}


def test_tokenizer_trained_on_train_split_covers_the_eval_split():
    """Every token of an eval prompt or reference also occurs in training (no untrained embedding), round-trips, and
    the longest eval pair fits the model's context."""
    cfg = DemoPolicyConfig()
    envs = load_suite(DEMO_SUITE).envs
    texts = {split: [t for e in envs if e.split == split for t in (e.prompt, e.reference)]
             for split in ("train", "eval")}
    tok = train_tokenizer(texts["train"], cfg.vocab_size)
    seen = {i for text in texts["train"] for i in tok(text).input_ids}
    for text in texts["eval"]:
        ids = tok(text).input_ids
        assert set(ids) <= seen, text
        assert tok.decode(ids, skip_special_tokens=True) == text, text
    longest = max(len(tok(e.prompt + e.reference).input_ids) for e in envs if e.split == "eval")
    assert longest + 1 <= cfg.max_position_embeddings  # + EOS


def test_concurrent_callers_build_the_policy_once_and_both_get_it_whole(tmp_path, monkeypatch):
    """Two test workers (or two local runs) asking for the demo policy at once: one builds, the other waits for the
    build lock and reuses the complete folder instead of deleting it mid-write."""
    import threading

    from posttrain.training import demo_policy

    builds, real_build = [], demo_policy.build_demo_policy

    def counted(*args, **kwargs):
        builds.append(threading.get_ident())
        return real_build(*args, **kwargs)

    monkeypatch.setattr(demo_policy, "build_demo_policy", counted)
    cfg, out, got = DemoPolicyConfig(sft_steps=2, sft_batch_size=2), tmp_path / "demo-policy", []
    callers = [threading.Thread(target=lambda: got.append(demo_policy.main_demo_policy(out, cfg))) for _ in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(builds) == 1
    assert got == [out, out]
    assert demo_policy.is_complete(out, cfg)
    assert policy_version(check_policy_dir(out)) == 0
