# Install rules and the CMake package. `cmake --install build/release --prefix P` installs
#   P/include/actorch/{base,kernels,core,comm,actors}/*.hpp  `#include <actorch/core/tensor.hpp>`,
#                       or "core/tensor.hpp" as inside the tree (P/include/actorch is on the path)
#   P/lib/libactorch_{base,kernels,core,comm,actors}.a
#   P/bin/actorch        the command line
#   P/lib/cmake/actorch  find_package(actorch): actorch::base, ::kernels, ::core, ::comm, ::actors
#                        and actorch::actorch (all of them), with their dependencies found again
#   P/lib/pkgconfig/actorch.pc   for builds without CMake
# tests/install builds examples/consumer against such a prefix.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ACTORCH_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/actorch)
set(actorch_layers base kernels core comm actors)
foreach(layer ${actorch_layers})
  set_target_properties(actorch_${layer} PROPERTIES EXPORT_NAME ${layer})
endforeach()
set_target_properties(actorch_openblas PROPERTIES EXPORT_NAME openblas)
set_target_properties(actorch_concurrentqueue PROPERTIES EXPORT_NAME concurrentqueue)
add_library(actorch_all INTERFACE)
target_link_libraries(actorch_all INTERFACE actorch_actors actorch_comm actorch_core)
set_target_properties(actorch_all PROPERTIES EXPORT_NAME actorch)
# An instrumented build's libraries need the sanitizer's runtime in whatever links them.
if(ACTORCH_SANITIZERS)
  list(JOIN ACTORCH_SANITIZERS "," actorch_san)
  target_link_options(actorch_base INTERFACE $<INSTALL_INTERFACE:-fsanitize=${actorch_san}>)
endif()

install(TARGETS actorch_base actorch_kernels actorch_core actorch_comm actorch_actors
                actorch_openblas actorch_concurrentqueue actorch_all
        EXPORT actorchTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${CMAKE_INSTALL_INCLUDEDIR}/actorch)
install(TARGETS actorch RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${actorch_layers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/actorch
        FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h" PATTERN "*.cuh")
install(EXPORT actorchTargets NAMESPACE actorch:: DESTINATION ${ACTORCH_INSTALL_CMAKEDIR})

configure_package_config_file(cmake/actorchConfig.cmake.in
  ${PROJECT_BINARY_DIR}/actorchConfig.cmake INSTALL_DESTINATION ${ACTORCH_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/actorchConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/actorchConfig.cmake
              ${PROJECT_BINARY_DIR}/actorchConfigVersion.cmake
        DESTINATION ${ACTORCH_INSTALL_CMAKEDIR})

# pkg-config: the same libraries, in link order, and their dependencies' flags.
set(actorch_pc_libs "-lactorch_actors -lactorch_comm -lactorch_core -lactorch_kernels -lactorch_base")
set(actorch_pc_deps "-lgloo ${CAF_CORE_LIB} ${OpenBLAS_LIBRARIES} -lcrypto -ljpeg -lpng16 -lz -pthread")
set(actorch_pc_cflags "-I\${includedir}/actorch -I\${includedir}")
if(ACTORCH_HAVE_CUDA)
  # With an rpath, as CMake gives its imported targets: CUDA's folder is not the loader's.
  set(actorch_pc_deps "${actorch_pc_deps} ${NCCL_LIBRARY} -L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcudart -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR}")
  set(actorch_pc_cflags "${actorch_pc_cflags} -DACTORCH_HAVE_CUDA=1 -I${CUDAToolkit_INCLUDE_DIRS}")
else()
  set(actorch_pc_cflags "${actorch_pc_cflags} -DACTORCH_HAVE_CUDA=0")
endif()
if(ACTORCH_SANITIZERS)
  set(actorch_pc_deps "${actorch_pc_deps} -fsanitize=${actorch_san}")
endif()
# The prefix relative to the .pc file's folder (lib/pkgconfig, or lib/<multiarch>/pkgconfig).
file(RELATIVE_PATH actorch_pc_up "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(cmake/actorch.pc.in ${PROJECT_BINARY_DIR}/actorch.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/actorch.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
