"""Parser behaviour beyond the samples declared in formats/lines.toml (those are checked at import)."""
from __future__ import annotations

import dataclasses

import pytest

from specwatch.logs import formats, parse, values


def test_declared_samples_pass_and_cover_every_kind():
    fmts = formats.load()
    parse.check_samples(fmts)  # raises on any drift
    assert set(fmts.lines) == set(parse.METRIC_KINDS)
    assert all(len(f.samples) >= 3 for f in fmts.lines.values())


def test_a_format_that_fails_its_own_sample_refuses_to_load():
    fmts = formats.load()
    dec = fmts.lines["sglang_decode"]
    broken_sample = dataclasses.replace(dec.samples[0], expect={"running_req": 13})
    broken = dataclasses.replace(fmts, lines={**fmts.lines, "sglang_decode": dataclasses.replace(
        dec, samples=(broken_sample,))})
    with pytest.raises(formats.FormatError, match="running_req=12, expected 13"):
        parse.check_samples(broken)


def test_format_without_samples_is_an_error(tmp_path):
    p = tmp_path / "f.toml"
    p.write_text('[[line]]\nkind = "x"\nheader = "X batch"\n')
    with pytest.raises(formats.FormatError, match="no sample lines"):
        formats.load(p)


@pytest.mark.parametrize("printed,name", [
    ("#running-req", "running_req"), ("gen throughput (token/s)", "gen_throughput"),
    ("pre-allocated usage", "pre_allocated_usage"), ("fwd+idle occupancy", "fwd_idle_occupancy"),
    ("est. decode TFLOPS/s (per GPU)", "est_decode_tflops_s"), ("Per-position acceptance rate",
                                                                 "per_position_acceptance_rate"),
])
def test_printed_keys_normalise_to_field_names(printed, name):
    assert values.normalize_key(printed) == name


def test_fields_are_parsed_by_key_not_position():
    a = parse.parse_line("[2026-01-01 00:00:00] Decode batch, #running-req: 3, #queue-req: 1, "
                         "gen throughput (token/s): 9.50, accept len: 2.00")
    assert a.fields == {"running_req": 3, "queue_req": 1, "gen_throughput": 9.5, "accept_len": 2.0}


def test_unknown_keys_are_kept_and_typed_by_shape():
    r = parse.parse_line("[2026-01-01 00:00:00] Decode batch, #running-req: 3, new thing: 4, "
                         "other: 1.5%, flag: True, label: abc, gen throughput (token/s): 1.00, #queue-req: 0")
    assert r.fields["new_thing"] == 4
    assert r.fields["other"] == 1.5 and isinstance(r.fields["other"], values.Pct)
    assert r.fields["flag"] is True and r.fields["label"] == "abc"


def test_every_rank_tag_order_is_accepted():
    for tags in ("TP0 DP1", "DP1 TP0", "PP1 TP0 DP1", "EP2 TP0 DP1"):
        r = parse.parse_line(f"[2026-01-01 00:00:00 {tags}] Decode batch, #running-req: 1, "
                             "gen throughput (token/s): 1.00, #queue-req: 0")
        assert r.rank == tags and r.ranks["dp_rank"] == 1 and r.ranks["tp_rank"] == 0


def test_carriage_return_progress_bar_before_a_metric_line():
    r = parse.parse_line("Capturing 10%|#   |\r[2026-01-01 00:00:00 TP0] Decode batch, #running-req: 1, "
                         "gen throughput (token/s): 1.00, #queue-req: 0\n")
    assert r.kind == "sglang_decode" and r.fields["running_req"] == 1


def test_server_args_repr_and_dict_forms_agree():
    repr_line = ("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/m', tp_size=2, "
                 "speculative_algorithm='EAGLE3', speculative_num_steps=3, "
                 "custom_sigquit_handler=<function f at 0x7f>, speculative_token_map=None)")
    dict_line = ("[2026-01-01 00:00:00] server_args={'model_path': '/m', 'tp_size': 2, "
                 "'speculative_algorithm': 'EAGLE3', 'speculative_num_steps': 3, "
                 "'speculative_token_map': None}")
    a, b = parse.parse_line(repr_line), parse.parse_line(dict_line)
    assert (a.form, b.form) == ("repr", "dict")
    for k in ("model_path", "tp_size", "speculative_algorithm", "speculative_num_steps",
              "speculative_token_map"):
        assert a.fields[k] == b.fields[k]
    assert a.fields["custom_sigquit_handler"] == "<function f at 0x7f>"


def test_cut_server_args_line_is_rejected_not_crashing():
    r = parse.parse_line("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/m', tp_si")
    assert isinstance(r, parse.Rejected) and r.kind == "server_args"


def test_ready_and_retract_lines_parse_as_events():
    assert parse.parse_line("[2026-01-01 00:00:00] The server is fired up and ready to roll!").kind == "ready"
    r = parse.parse_line("[2026-01-01 00:00:00 TP0] KV cache pool is full. Retract requests. "
                         "#retracted_reqs: 2, #new_tokens_gained: 100")
    assert r.kind == "retract" and "#retracted_reqs: 2" in r.fields["message"]


def test_a_megabyte_line_is_noise_quickly():
    assert parse.parse_line("x" * (1 << 20)) is None
    assert parse.parse_line("batch " * 200_000) is None
