# ft_add_plugin(<target> SOURCES <files>...)
#
# Builds an ftrun plugin: a shared library with hidden visibility whose only
# exported symbol is the entry point declared by FT_PLUGIN (see
# include/ft/plugin/define.hpp). Used by the stock plugins and by third parties
# through find_package(ft).
function(ft_add_plugin target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT_DIRECTORY" "SOURCES")
  add_library(${target} MODULE ${arg_SOURCES})
  # The engine ft compiled once, where this build or package has it.
  if(TARGET ft::engine)
    target_link_libraries(${target} PRIVATE ft::engine)
  else()
    target_link_libraries(${target} PRIVATE ft::ft)
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(arg_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${arg_OUTPUT_DIRECTORY})
  endif()
  # Refuse undefined symbols at link time rather than at dlopen time.
  target_link_options(${target} PRIVATE LINKER:--no-undefined)
endfunction()
