# PLY files written by Python's plyfile are read by flashot, and flashot's are read by plyfile: flashot_ply_tool
# dumps and converts, tests/io/ply_plyfile_interop.py drives it. Registered only when FLASHOT_PYTHON names a python
# with plyfile and numpy installed (scripts/python-env.sh makes one; tests/io/CMakeLists.txt declares the variable).

add_executable(flashot_ply_tool ${CMAKE_CURRENT_SOURCE_DIR}/ply_tool/ply_tool.cpp)
target_link_libraries(flashot_ply_tool PRIVATE flashot_io)

if(FLASHOT_PYTHON)
  add_test(NAME ply_plyfile_interop
           COMMAND ${FLASHOT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/ply_plyfile_interop.py $<TARGET_FILE:flashot_ply_tool>)
endif()
