"""Native engines in a child process: calls go through, a crash is one line naming the signal (and
the library, where the fault handler could tell), the child is gone afterwards, and the portable
llama.cpp build's cmake options follow the CPU's flags with AMX always off."""

import os
import signal

import pytest

from specnb.native import llama_build
from specnb.native.isolation import Child, EngineCrashed, describe_exit


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_child_answers_calls_and_is_gone_after_close():
    child = Child("collections:Counter", "abracadabra", what="counter")
    assert child.call("most_common", 1) == [("a", 5)]
    with pytest.raises(RuntimeError, match="counter: TypeError"):
        child.call("most_common", "x")  # an exception there is an ordinary error here, the child lives on
    assert child.call("total") == 11
    pid = child.proc.pid
    child.close()
    assert gone(pid)


def test_a_native_fault_is_one_line_naming_the_signal_and_the_library():
    child = Child("ctypes:CDLL", None, what="libc")
    with pytest.raises(EngineCrashed) as crashed:
        child.call("strlen", None)  # strlen(NULL): a real fault inside libc
    message = str(crashed.value)
    assert message.startswith("libc died with SIGSEGV (segmentation fault) in libc.so")
    assert "\n" not in message
    with pytest.raises(EngineCrashed, match="SIGSEGV"):
        child.call("strlen", b"again")  # a dead engine stays dead, with the same line
    assert gone(child.proc.pid)


def test_the_crash_hook_kills_the_child_with_the_named_signal(monkeypatch):
    monkeypatch.setenv("SPECNB_CRASH_ENGINE", "SIGILL")
    child = Child("collections:Counter", "ab", what="llama.cpp (model.gguf)")
    with pytest.raises(EngineCrashed, match=r"^llama.cpp \(model.gguf\) died with SIGILL \(illegal instruction\)$"):
        child.call("total")


def test_a_factory_that_fails_is_an_ordinary_error():
    with pytest.raises(RuntimeError, match="engine: FileNotFoundError"):
        Child("builtins:open", "/no/such/file", what="engine")


def test_exits_are_described_in_one_line():
    assert describe_exit("x", -int(signal.SIGILL), "specnb-fault: SIGILL at 0x1 in libggml-cpu.so\n") == \
        "x died with SIGILL (illegal instruction) in libggml-cpu.so"
    assert describe_exit("x", 3, "loading\nout of memory\n\n") == "x exited with code 3: out of memory"
    assert describe_exit("x", -int(signal.SIGKILL)) == "x died with SIGKILL (killed)"


SAPPHIRE_RAPIDS = ("flags : fpu sse4_2 avx avx2 fma f16c bmi2 avx_vnni avx512f avx512cd avx512vl avx512dq avx512bw "
                   "avx512vbmi avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_int8 amx_bf16")
EPYC_ZEN2 = "flags : fpu sse4_2 avx avx2 fma f16c bmi2"


def test_the_build_uses_exactly_the_cpus_instruction_sets_and_never_amx():
    xeon = llama_build.cmake_options(llama_build.cpu_flags(SAPPHIRE_RAPIDS), "x86_64")
    assert xeon["GGML_NATIVE"] == "OFF" and xeon["GGML_BACKEND_DL"] == "OFF"
    assert all(xeon[k] == "OFF" for k in ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"))
    assert all(xeon[k] == "ON" for k in ("GGML_AVX2", "GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX512_BF16"))
    epyc = llama_build.cmake_options(llama_build.cpu_flags(EPYC_ZEN2), "x86_64")
    assert epyc["GGML_AVX2"] == "ON" and epyc["GGML_FMA"] == "ON"
    assert all(epyc[k] == "OFF" for k in ("GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX_VNNI", "GGML_AMX_INT8"))
    partial = llama_build.cmake_options({"avx512f", "avx512_vnni"}, "x86_64")  # no CD/VL/DQ/BW: no AVX-512 base
    assert partial["GGML_AVX512"] == "OFF"
    assert llama_build.cmake_options(set(), "aarch64")["GGML_NATIVE"] == "ON"  # ggml reads ARM features itself
    assert llama_build.cmake_options(set(), "x86_64")["GGML_AVX"] == "OFF"  # nothing assumed


def test_a_failed_self_test_makes_llama_cpp_absent_with_its_reason(tmp_path, monkeypatch):
    from specnb.native import llama_cpp

    monkeypatch.setenv("SPECNB_CACHE", str(tmp_path))
    status = llama_build.self_test(tmp_path / "missing.gguf", timeout_s=120)
    assert not status["ok"] and status["error"].startswith("llama.cpp self-test exited with code 1")
    llama_build.status_path().write_text('{"ok": false, "error": "llama.cpp self-test died with SIGILL '
                                         '(illegal instruction) in libggml-cpu.so"}')
    assert llama_cpp.missing_note() == ("llama.cpp left out: llama.cpp self-test died with SIGILL (illegal "
                                        "instruction) in libggml-cpu.so (at setup; see docs/gpus-and-macs.md, "
                                        "*llama.cpp on your CPU*)")
