# The API reference (Doxygen, Debian's `doxygen`): the target ft_api_docs
# writes build/<preset>/docs/api/html; the test docs.api_reference builds it
# and checks that every public concept is documented. Sets FT_DOXYFILE where
# Doxygen is found.
# A source package without docs/ (Conan's exported sources) builds none.
if(NOT EXISTS ${PROJECT_SOURCE_DIR}/docs/Doxyfile.in)
  return()
endif()
find_package(Doxygen QUIET)
if(NOT DOXYGEN_FOUND)
  message(STATUS "ft: no doxygen, so the API reference (ft_api_docs) is not built; Debian's doxygen package provides it")
  return()
endif()
set(FT_DOXYFILE ${PROJECT_BINARY_DIR}/docs/Doxyfile)
configure_file(${PROJECT_SOURCE_DIR}/docs/Doxyfile.in ${FT_DOXYFILE} @ONLY)
file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/docs/api)
add_custom_target(ft_api_docs
  COMMAND ${DOXYGEN_EXECUTABLE} ${FT_DOXYFILE}
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
  COMMENT "API reference in ${PROJECT_BINARY_DIR}/docs/api/html"
  VERBATIM)
