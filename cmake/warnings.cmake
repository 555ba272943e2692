# Strict warnings on actorch's own targets only; third-party headers come in as SYSTEM.
function(actorch_target_options target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
      -Wcast-align -Wunused -Woverloaded-virtual -Wimplicit-fallthrough>)
  # nvcc: constexpr functions such as std::bit_cast callable from device code, and the host
  # compiler's warnings.
  # --fmad=false: no fused multiply-add, so that the functors shared with the CPU
  # (kernels/functors.hpp) round as the CPU's code does (a + alpha * b twice, not once).
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr
    --fmad=false -Xcompiler=-Wall,-Wextra,-Wshadow>)
  if(ACTORCH_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Werror>)
    # GCC 12 reports these inside libstdc++'s std::string when strings are concatenated at
    # -O2 and above (GCC bugs 105329 and 105651, fixed in 13): kept as warnings, not errors.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:
        -Wno-error=array-bounds -Wno-error=restrict -Wno-error=stringop-overflow>)
    endif()
  endif()
  # In the tree, "core/tensor.hpp" from the source root; installed, from include/actorch.
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                              $<INSTALL_INTERFACE:include/actorch>)
endfunction()
