# The Hessian-vector-product benchmark (tests/bench/hvp_bench.cpp): engine only, so it builds for the GPU machine
# without Boost or io. Include from tests/bench/CMakeLists.txt:  include(${CMAKE_CURRENT_SOURCE_DIR}/hvp.cmake)
# Run on the GPU with tests/bench/hvp_run.sh (flashot, then FlashSinkhorn on the same inputs).
add_executable(flashot_hvp_bench ${CMAKE_CURRENT_LIST_DIR}/hvp_bench.cpp)
target_link_libraries(flashot_hvp_bench PRIVATE flashot::engine)
target_compile_options(flashot_hvp_bench PRIVATE -Wall -Wextra)
