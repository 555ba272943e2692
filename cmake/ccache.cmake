# Use ccache for every compiler when it is installed: CI rebuilds from a clean clone.
find_program(ACTORCH_CCACHE ccache)
if(ACTORCH_CCACHE)
  set(CMAKE_C_COMPILER_LAUNCHER ${ACTORCH_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${ACTORCH_CCACHE})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${ACTORCH_CCACHE})
endif()
