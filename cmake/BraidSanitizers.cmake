# BRAID_SANITIZE: a comma-separated list passed to -fsanitize= (e.g. "address,undefined").
set(BRAID_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined")
if(BRAID_SANITIZE)
  add_compile_options(-fsanitize=${BRAID_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${BRAID_SANITIZE})
endif()
