# Runs one libFuzzer target briefly and repeatably (ctest): a fresh copy of the seed corpus (libFuzzer adds new
# inputs to its first corpus folder, and the source tree must stay untouched), a fixed seed, RUNS inputs.
# Variables: FUZZER, RUNS, SEEDS (folder, may be absent), DICTIONARY (file or empty), WORK (scratch folder).
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
if(EXISTS ${SEEDS})
  file(GLOB _seeds ${SEEDS}/*)
  if(_seeds)
    file(COPY ${_seeds} DESTINATION ${WORK})
  endif()
endif()
set(_arguments -runs=${RUNS} -seed=1 -max_len=4096 -timeout=10 -rss_limit_mb=2048)
if(DICTIONARY)
  list(APPEND _arguments -dict=${DICTIONARY})
endif()
execute_process(COMMAND ${FUZZER} ${_arguments} ${WORK} RESULT_VARIABLE _result)
if(NOT _result EQUAL 0)
  message(FATAL_ERROR "${FUZZER} found a failing input (exit ${_result}); the crash-* file above reproduces it")
endif()
