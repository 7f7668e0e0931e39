"""Why a vLLM server died, as the installed vLLM says it: its own logger writes the children's
tracebacks (process tag, logger prefix on every line, VLLM_LOGGING_PREFIX before it), its own
KV-cache check raises the start-up memory errors, and its own serve parser refuses a flag.
specwatch's failure cause must name the real exception, and doctor's hint must use vLLM's flags."""
from __future__ import annotations

import json
import os
import subprocess
import textwrap

import pytest

from specwatch.logs import failure

from .conftest import ROOT, VLLM_PY, _check_specwatch_py

# Three processes as vLLM's multiproc start-up has them: a worker dies with the real cause, the
# engine core re-raises a pointer to it, the API server's own pointer ends the log.
_DYING = textwrap.dedent("""
    import sys, traceback
    from vllm.config.logging import LoggingConfig
    from vllm.logger import configure_logging, init_logger, set_vllm_process_name
    configure_logging(LoggingConfig())
    log = init_logger("vllm.v1.executor.multiproc_executor")
    def fail(name, exc):
        set_vllm_process_name(name)
        try:
            raise exc
        except Exception:
            log.exception("%s failed to start.", name)
    fail("Worker_TP1", ValueError("There is no module or parameter named 'draft_id_to_target_id' "
                                  "in Eagle3LlamaForCausalLM."))
    log.info("[shutdown] Executor: waiting for worker exit count=1")
    fail("EngineCore", Exception("WorkerProc initialization failed due to an exception in a "
                                 "background process. See stack trace for root cause."))
    try:
        raise RuntimeError("Engine core initialization failed. See root cause above. "
                           "Failed core proc(s): {}")
    except RuntimeError:
        traceback.print_exc()
""")


@pytest.mark.parametrize("prefix", ["", "[node-3] "])
def test_the_cause_of_a_real_vllm_multiprocess_death_is_the_workers_exception(tmp_path, prefix):
    log = tmp_path / "server.log"
    with open(log, "w") as out:
        subprocess.run([VLLM_PY, "-c", _DYING], stdout=out, stderr=subprocess.STDOUT, check=True,
                       env={**os.environ, "VLLM_LOGGING_PREFIX": prefix})
    text = log.read_text()
    assert f"{prefix}(Worker_TP1 pid=" in text      # vLLM's own prefix on the traceback lines
    assert failure.failure_cause(log) == ("ValueError: There is no module or parameter named "
                                          "'draft_id_to_target_id' in Eagle3LlamaForCausalLM.")


def _kv_messages() -> list[str]:
    from vllm.v1.core.kv_cache_utils import _check_enough_kv_cache_memory
    out = []
    for available, needed in ((0, 1), (1 << 30, 4 << 30)):
        with pytest.raises(ValueError) as err:
            _check_enough_kv_cache_memory(available, lambda n=needed: n, 32768,
                                          lambda mem: 8192)
        out.append(f"ValueError: {err.value}")
    return out


def _parser_refusal(tmp_path) -> str:
    """The serve parser's own refusal, from the module specwatch launches."""
    log = tmp_path / "refused.log"
    with open(log, "w") as out:
        rc = subprocess.run([VLLM_PY, "-m", "vllm.entrypoints.openai.api_server",
                             "--speculative-num-steps", "3"], stdout=out,
                            stderr=subprocess.STDOUT, timeout=300).returncode
    assert rc != 0
    cause = failure.failure_cause(log)
    assert cause is not None and "--speculative-num-steps" in cause, log.read_text()[-2000:]
    return cause


def test_doctors_hints_for_vllms_own_messages_name_vllms_flags(tmp_path):
    reasons = _kv_messages() + [_parser_refusal(tmp_path)]
    code = ("import json, sys\nfrom specwatch.diagnose.serving import failure_hint\n"
            "print(json.dumps([failure_hint(r, {'served_by': 'vllm'}) "
            "for r in json.loads(sys.stdin.read())]))")
    got = json.loads(subprocess.run([_check_specwatch_py(), "-c", code], input=json.dumps(reasons),
                                    capture_output=True, text=True, check=True, cwd=ROOT).stdout)
    kv_empty, kv_short, parser = got
    for hint in (kv_empty, kv_short):
        assert "raise --gpu-memory-utilization or lower --max-model-len" in hint
    assert "vLLM's parser rejected a flag" in parser
    assert "python -m vllm.entrypoints.openai.api_server --help" in parser
    for hint in got:
        assert "--mem-fraction-static" not in hint and "sglang" not in hint.lower()


def test_every_flag_doctor_advises_on_vllm_is_vllms():
    """The serve parser specwatch checks flags with takes every flag doctor names for vLLM, and
    the speculative-config fields and environment variable it names are vLLM's."""
    import dataclasses

    import vllm.envs
    from vllm.config.speculative import SpeculativeConfig
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = make_arg_parser(FlexibleArgumentParser())
    named = json.loads(subprocess.run([_check_specwatch_py(), "tests/advice_flags.py"],
                                      capture_output=True, text=True, check=True,
                                      cwd=ROOT).stdout)["vllm"]
    assert "--gpu-memory-utilization" in named and "--max-num-seqs" in named
    assert [f for f in named if f not in parser._option_string_actions] == []
    fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
    assert {"num_speculative_tokens", "num_speculative_tokens_per_batch_size"} <= fields
    assert "VLLM_LOG_STATS_INTERVAL" in vllm.envs.environment_variables
