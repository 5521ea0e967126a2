# The packages ft's headers need. Shared by the build and by the installed
# ftConfig.cmake, so that a consumer of find_package(ft) gets the same set.
include(CMakeFindDependencyMacro)
macro(ft_find_dependency)
  if(CMAKE_FIND_PACKAGE_NAME)        # inside find_package(ft)
    find_dependency(${ARGN})
  else()                             # building ft itself
    find_package(${ARGN} REQUIRED)
  endif()
endmacro()
ft_find_dependency(Eigen3 3.3 NO_MODULE)
ft_find_dependency(range-v3)
ft_find_dependency(Boost 1.74)
ft_find_dependency(tomlplusplus 3)
ft_find_dependency(nlohmann_json 3)
