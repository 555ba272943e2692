# Use ccache for every compiler when it is installed: CI rebuilds from a clean clone. Paths
# under the tree are hashed relative to it (CCACHE_BASEDIR), so clones elsewhere share one
# cache: .ci/fresh-root.sh's clone reuses the CI machine's objects. (Debian 12's ccache 4.7
# takes no settings on its command line, hence `cmake -E env`.)
find_program(ACTORCH_CCACHE ccache)
if(ACTORCH_CCACHE)
  set(actorch_launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}
      ${ACTORCH_CCACHE})
  set(CMAKE_C_COMPILER_LAUNCHER ${actorch_launcher})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${actorch_launcher})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${actorch_launcher})
endif()
