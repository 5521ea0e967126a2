# vcpkg port for ft. Built from this checkout (an overlay port):
#   vcpkg install ft --overlay-ports=<ft>/ports
# A registry copy would fetch a release with vcpkg_from_git instead.
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS -DFT_BUILD_TESTS=OFF -DFT_BUILD_EXAMPLES=OFF -DFT_ENABLE_CUDA=OFF)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH lib/cmake/ft)
vcpkg_copy_tools(TOOL_NAMES ftrun AUTO_CLEAN)
file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/debug/include" "${CURRENT_PACKAGES_DIR}/debug/share")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
