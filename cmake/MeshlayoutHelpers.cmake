# meshlayout_library(NAME SRCS ... DEPS ...): a static library of one module (installed and
# exported by cmake/MeshlayoutInstall.cmake unless it is the CLI's).
# meshlayout_test(NAME SRCS ... DEPS ... [LABELS ...]): a gtest binary whose tests
# ctest discovers one by one.
function(meshlayout_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_include_directories(${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
                                            $<INSTALL_INTERFACE:include>)
  set_property(GLOBAL APPEND PROPERTY MESHLAYOUT_LIBRARIES ${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

function(meshlayout_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT MESHLAYOUT_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    MESHLAYOUT_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

# meshlayout_mpi_test(NAME SRCS ... DEPS ... [TIMEOUT s]): a test binary with the shared
# mpirun main (runtime/mpi/mpi_gtest_main.cc), run by ctest as mpi.<NAME>.np2 and .np4.
function(meshlayout_mpi_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS" ${ARGN})
  if(NOT (MESHLAYOUT_WITH_MPI AND MESHLAYOUT_BUILD_TESTS))
    return()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_executable(${name}_mpi_test ${ARG_SRCS})
  target_link_libraries(${name}_mpi_test PRIVATE ${ARG_DEPS} meshlayout_mpi_gtest_main)
  foreach(np 2 4)
    add_test(NAME mpi.${name}.np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe -np ${np}
                     $<TARGET_FILE:${name}_mpi_test>)
    set_tests_properties(mpi.${name}.np${np} PROPERTIES LABELS mpi TIMEOUT ${ARG_TIMEOUT}
                         PROCESSORS ${np})
  endforeach()
endfunction()
