"""The built-in engine's adaptive speculation (specwatch/engine/adaptive.py) against real SGLang's
`AdaptiveSpeculativeParams`: the same config files, the same batch sizes and verify results must
give the same steps at every step, and the same config errors."""
from __future__ import annotations

import json
import random

import pytest

from sglang.srt.speculative import adaptive_spec_params as real

from specwatch.engine import adaptive as mine

KNOB_VALUES = {"up_hysteresis": [-0.3, 0.0, 0.2], "down_hysteresis": [-0.25, 0.0, 0.3],
               "ema_alpha": [0.1, 0.2, 0.7], "update_interval": [1, 2, 5],
               "warmup_batches": [0, 3, 10], "ceiling_coeff": [0, 0.5, 1.5]}


def _random_config(rng: random.Random) -> dict:
    cfg = {}
    for bs in rng.sample([1, 2, 4, 5, 8, 16, 32, 64], rng.randint(1, 4)):
        entry = {"candidate_steps": rng.sample([0, 1, 2, 3, 5, 7], rng.randint(1, 4))}
        for knob, values in KNOB_VALUES.items():
            if rng.random() < 0.3:
                entry[knob] = rng.choice(values)
        cfg[str(bs)] = entry
    if rng.random() < 0.3:                     # a top-level knob every slot shares
        cfg["update_interval"] = rng.choice([1, 3])
    return cfg


@pytest.mark.parametrize("seed", range(6))
def test_steps_match_real_sglang_step_by_step(tmp_path, seed):
    rng = random.Random(seed)
    for trial in range(40):
        path = tmp_path / f"c{trial}.json"
        path.write_text(json.dumps(_random_config(rng)))
        initial = rng.choice([0, 1, 2, 3, 5, 7])
        ref = real.AdaptiveSpeculativeParams(initial_steps=initial, cfg_path=str(path))
        got = mine.AdaptiveParams(initial, str(path))
        if rng.random() < 0.5:                 # CUDA-graph padding before routing
            graph_bs = sorted(rng.sample(range(1, 40), 6))
            ref.set_cuda_graph_bs(graph_bs)
            got.set_cuda_graph_bs(graph_bs)
        assert got.candidate_steps == ref.candidate_steps
        for step in range(150):
            bs = rng.randint(1, 70)
            steps = ref.get_steps_for_batch(bs)
            assert got.steps_for_batch(bs) == steps, (path.read_text(), step)
            accepted = [rng.randint(0, steps) for _ in range(min(bs, 6))]
            assert got.on_verify_complete(accepted, bs) == \
                ref.on_verify_complete(accepted, bs), (path.read_text(), step)


@pytest.mark.parametrize("cfg", [
    {"1": {"candidate_steps": []}}, {"1": {"candidate_steps": [-1]}}, {"1": {"candidate_steps": "3"}},
    {"1": {}}, {"ema_alpha": 0.3}, {},
], ids=["empty", "negative", "string", "missing", "no-bs-key", "empty-object"])
def test_config_errors_where_real_sglang_raises(tmp_path, cfg):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError):
        real.resolve_candidate_steps_from_config(str(path))
    with pytest.raises(mine.AdaptiveConfigError):
        mine.candidate_steps(str(path))


def test_default_config_is_sglangs():
    assert mine.DEFAULT_ADAPTIVE_CONFIG == real.DEFAULT_ADAPTIVE_CONFIG
    assert mine.candidate_steps(None) == real.resolve_candidate_steps_from_config(None)
