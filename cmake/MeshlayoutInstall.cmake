# Install rules: `cmake --install build --prefix P` puts
#   P/include/meshlayout/...            the public headers (umbrella: meshlayout/meshlayout.h)
#   P/lib/libmeshlayout_*.a             the module libraries
#   P/bin/meshlayout                    the CLI
#   P/lib/cmake/meshlayout/             find_package(meshlayout CONFIG): meshlayout::meshlayout
#                                       (and meshlayout::mpi when built with MPI)
#   P/lib/pkgconfig/meshlayout.pc       pkg-config --cflags --libs meshlayout
# and, with MESHLAYOUT_PYTHON, the Python package (python/CMakeLists.txt).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# meshlayout::meshlayout: every module library except MPI (link order for the .pc below).
set(MESHLAYOUT_EXPORTED_MODULES meshlayout_tokenizers meshlayout_plan meshlayout_rules meshlayout_models meshlayout_train meshlayout_nn meshlayout_hf meshlayout_io meshlayout_ops meshlayout_kernels meshlayout_init
    meshlayout_layout_map meshlayout_array meshlayout_safetensors meshlayout_runtime
    meshlayout_layout meshlayout_core)
add_library(meshlayout_all INTERFACE)
target_link_libraries(meshlayout_all INTERFACE ${MESHLAYOUT_EXPORTED_MODULES})
set_target_properties(meshlayout_all PROPERTIES EXPORT_NAME meshlayout)
add_library(meshlayout::meshlayout ALIAS meshlayout_all)
set(install_targets meshlayout_all ${MESHLAYOUT_EXPORTED_MODULES})
if(MESHLAYOUT_WITH_MPI)
  set_target_properties(meshlayout_mpi PROPERTIES EXPORT_NAME mpi)
  add_library(meshlayout::mpi ALIAS meshlayout_mpi)
  list(APPEND install_targets meshlayout_mpi)
endif()
# Every library made by meshlayout_library must be exported or deliberately left out.
get_property(all_libraries GLOBAL PROPERTY MESHLAYOUT_LIBRARIES)
foreach(lib IN LISTS all_libraries)
  if(NOT lib IN_LIST install_targets AND NOT lib STREQUAL "meshlayout_cli_lib")
    message(FATAL_ERROR "library ${lib} is neither installed nor excluded (cmake/MeshlayoutInstall.cmake)")
  endif()
endforeach()

install(TARGETS ${install_targets} EXPORT meshlayoutTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS meshlayout RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(header_excludes PATTERN "*test*" EXCLUDE PATTERN "*conformance*" EXCLUDE PATTERN "testing" EXCLUDE PATTERN "cli" EXCLUDE)
if(NOT MESHLAYOUT_WITH_MPI)
  list(APPEND header_excludes PATTERN "mpi" EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/meshlayout DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h" ${header_excludes})

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/meshlayout)
install(EXPORT meshlayoutTargets NAMESPACE meshlayout:: DESTINATION ${config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/meshlayoutConfig.cmake.in
  ${PROJECT_BINARY_DIR}/meshlayoutConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/meshlayoutConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/meshlayoutConfig.cmake
              ${PROJECT_BINARY_DIR}/meshlayoutConfigVersion.cmake DESTINATION ${config_dir})

list(TRANSFORM MESHLAYOUT_EXPORTED_MODULES PREPEND "-l" OUTPUT_VARIABLE pc_libs)
if(MESHLAYOUT_CUDA)  # the CUDA device kind: the CUDA runtime (static) and cuBLAS
  list(APPEND pc_libs "-L${CUDAToolkit_LIBRARY_DIR}" -lcublas -lcublasLt -lcudart_static -ldl -lrt)
endif()
string(REPLACE ";" " " MESHLAYOUT_PC_LIBS "${pc_libs}")
# Relocatable: the prefix is found from the .pc file's own place (pkg-config's ${pcfiledir}).
file(RELATIVE_PATH MESHLAYOUT_PC_UP "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/meshlayout.pc.in
               ${PROJECT_BINARY_DIR}/meshlayout.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/meshlayout.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
