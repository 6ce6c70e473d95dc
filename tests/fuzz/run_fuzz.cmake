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
execute_process(COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=quarantine_size_mb=64 ${FUZZER} ${_arguments} ${WORK}
                RESULT_VARIABLE _result)
if(NOT _result EQUAL 0)
  message(FATAL_ERROR "${FUZZER} found a failing input (exit ${_result}); the crash-* file above reproduces it")
endif()
