# Runs one libFuzzer target briefly and repeatably (ctest): a fresh copy of the seed corpus (libFuzzer adds new
# inputs to its first corpus folder, and the source tree must stay untouched), a fixed seed, RUNS inputs.
# Variables: FUZZER, RUNS, SEEDS and EXTRA_SEEDS (folders, may be absent), DICTIONARY (file or empty), WORK (scratch
# folder), MAX_LEN (bytes).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
foreach(_folder IN ITEMS ${SEEDS} ${EXTRA_SEEDS})
  if(IS_DIRECTORY ${_folder})
    file(GLOB _seeds ${_folder}/*)
    if(_seeds)
      file(COPY ${_seeds} DESTINATION ${WORK})
    endif()
  endif()
endforeach()
if(NOT MAX_LEN)
  set(MAX_LEN 4096)
endif()
set(_arguments -runs=${RUNS} -seed=1 -max_len=${MAX_LEN} -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1048576)
if(DICTIONARY)
  list(APPEND _arguments -dict=${DICTIONARY})
endif()
# ASan's quarantine (freed memory held back to catch use-after-free) counts in the RSS that -rss_limit_mb watches:
# on a 2-core CI run (2026-12-01) fuzz_h5ad stopped at 2366 MB with 30 MB live and 2.3 GB quarantined. A 64 MB
# quarantine keeps the limit a measure of what the reader holds.
# The artifact goes into WORK, where the summary below can name it.
list(APPEND _arguments -artifact_prefix=${WORK}/)
execute_process(COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=quarantine_size_mb=64 ${FUZZER} ${_arguments} ${WORK}
                RESULT_VARIABLE _result OUTPUT_VARIABLE _log ERROR_VARIABLE _log)
message("${_log}")
if(NOT _result EQUAL 0)
  # A CI log may keep only the end of a long output, and the reports of the isolated walk's children (handled, not
  # findings) come before the finding: repeat the last report's stack at the very end.
  # The finding's report is libFuzzer's last one (out-of-memory, timeout) or, where that says "deadly signal", the
  # sanitizer report just before it; earlier sanitizer reports may be the children's.
  string(FIND "${_log}" "ERROR: libFuzzer" _fuzzer REVERSE)
  string(FIND "${_log}" "ERROR: AddressSanitizer" _asan REVERSE)
  string(FIND "${_log}" "ERROR: LeakSanitizer" _lsan REVERSE)
  set(_sanitizer ${_asan})
  if(_lsan GREATER _sanitizer)
    set(_sanitizer ${_lsan})
  endif()
  set(_last ${_sanitizer})
  if(_fuzzer GREATER_EQUAL 0)
    string(SUBSTRING "${_log}" ${_fuzzer} 40 _kind)
    if(NOT (_kind MATCHES "deadly signal" AND _sanitizer GREATER_EQUAL 0 AND _sanitizer LESS _fuzzer))
      set(_last ${_fuzzer})
    endif()
  endif()
  set(_digest "")
  if(_last GREATER_EQUAL 0)
    string(SUBSTRING "${_log}" ${_last} -1 _report)
    string(REPLACE ";" "," _report "${_report}")
    string(REPLACE "\n" ";" _lines "${_report}")
    foreach(_line IN LISTS _lines)
      if(_line MATCHES "ERROR|SUMMARY|^ *#[0-9]+ 0x|freed by|allocated by|is located|Test unit written|^MS: ")
        string(APPEND _digest "${_line}\n")
      endif()
    endforeach()
  endif()
  file(GLOB _artifacts ${WORK}/crash-* ${WORK}/oom-* ${WORK}/timeout-* ${WORK}/leak-* ${WORK}/slow-unit-*)
  message(FATAL_ERROR "${FUZZER} found a failing input (exit ${_result}): ${_artifacts}\n"
                      "The last report, its stack:\n${_digest}")
endif()
