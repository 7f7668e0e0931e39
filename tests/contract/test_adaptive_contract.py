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


def test_recommended_schedule_routes_in_real_sglang_as_its_bands(tmp_path):
    """`specwatch recommend --engine sglang` on known runs: real SGLang's routing of the file it
    writes gives every batch size its band's steps (k=3 alone, 1 at 2-4, off from 5)."""
    import datetime as dt

    from specwatch.db import store
    from specwatch.diagnose import recommend

    plan = {("baseline", 1): [100, 110, 90], ("s1", 1): [130, 143, 117],
            ("s3", 1): [160, 176, 144], ("baseline", 4): [200, 220, 180],
            ("s1", 4): [300, 330, 270], ("s3", 4): [290, 319, 261],
            ("baseline", 16): [400, 440, 360], ("s1", 16): [300, 330, 270],
            ("s3", 16): [200, 220, 180]}
    db = tmp_path / "r.duckdb"
    with store.writer(db) as con:
        for (cfg, c), xs in plan.items():
            k = None if cfg == "baseline" else int(cfg[1])
            for rep, x in enumerate(xs):
                store.upsert_run(con, dict(
                    run_id=f"s/{cfg}/c{c}/r{rep}", run_name=f"{cfg}/c{c}/r{rep}", origin="sweep",
                    sweep_name="s", config_name=cfg, concurrency=c, repeat_idx=rep, status="ok",
                    engine="sglang", model_path="/m", tp_size=1, dp_size=1, is_baseline=k is None,
                    draft_model_path=k and "/d", speculative_algorithm=k and "EAGLE3",
                    speculative_num_steps=k, speculative_eagle_topk=k and 1,
                    speculative_num_draft_tokens=k and k + 1, output_tok_s=float(x),
                    created_at=dt.datetime(2026, 12, 1, 10, rep)))
    rec = recommend.recommend(db, "sglang")
    assert [b.steps for b in rec.bands] == [3, 1, 0]
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(rec.schedule))
    ref = real.AdaptiveSpeculativeParams(initial_steps=rec.max_steps, cfg_path=str(path))
    assert real.resolve_candidate_steps_from_config(str(path)) == [0, 1, 3]
    for b in rec.bands:
        for bs in range(b.batch_size_min, (b.batch_size_max or 256) + 1):
            assert ref.get_steps_for_batch(bs) == b.steps, bs
            ref.on_verify_complete([0] * min(bs, 4), bs)      # one candidate: never moves
            assert ref.get_steps_for_batch(bs) == b.steps, bs
