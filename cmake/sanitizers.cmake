# ACTORCH_SANITIZERS="address;undefined" or "thread": applied to every target of the tree, so
# the kernels, core and tests are instrumented together.
if(ACTORCH_SANITIZERS)
  list(JOIN ACTORCH_SANITIZERS "," _actorch_san)
  if("thread" IN_LIST ACTORCH_SANITIZERS AND "address" IN_LIST ACTORCH_SANITIZERS)
    message(FATAL_ERROR "ACTORCH_SANITIZERS: thread cannot be combined with address")
  endif()
  add_compile_options(-fsanitize=${_actorch_san} -fno-omit-frame-pointer -g)
  if("undefined" IN_LIST ACTORCH_SANITIZERS)
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
  add_link_options(-fsanitize=${_actorch_san})
endif()
