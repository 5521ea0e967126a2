"""Conan 2 recipe for ft.

The libraries ft builds on come from the system's packages (Debian's on the
machines ft is developed on), checked by `system_requirements`; the package
itself is ft's own CMake install, so consumers use ft's ftConfig.cmake.
"""
from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.system.package_manager import Apt


class FtConan(ConanFile):
    name = "ft"
    version = "0.1.0"
    license = "MIT"
    description = "Fine-tuning of large language models in C++: header-only template library (its text tools compiled), ftrun and plugins"
    topics = ("llm", "fine-tuning", "lora", "header-only")
    settings = "os", "arch", "compiler", "build_type"
    options = {"runner": [True, False]}
    default_options = {"runner": True}
    exports_sources = ("CMakeLists.txt", "LICENSE", "cmake/*", "include/*", "src/*", "runner/*", "plugins/*", "recipes/*")

    def system_requirements(self):
        packages = ["libeigen3-dev", "librange-v3-dev", "libboost-dev", "libtomlplusplus-dev", "nlohmann-json3-dev",
                    "libopenblas-dev", "libopenblas0-openmp", "libpcre2-dev", "zlib1g-dev", "libzstd-dev", "pkg-config", "libopenmpi-dev", "openmpi-bin"]
        if self.options.runner:
            packages += ["libcli11-dev", "libcpp-httplib-dev"]
        Apt(self).install(packages)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["FT_BUILD_RUNNER"] = bool(self.options.runner)
        tc.cache_variables["FT_BUILD_TESTS"] = False
        tc.cache_variables["FT_BUILD_EXAMPLES"] = False
        # The package is built without CUDA (no ft-cuda plugin; the CUDA
        # headers are installed): Conan's toolchain sets the C++ standard
        # where CMake's CUDA checks also read it, which CMake 3.25 cannot map
        # to nvcc. A from-source build with nvcc builds the plugin.
        tc.cache_variables["FT_ENABLE_CUDA"] = "OFF"
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        CMake(self).install()

    def package_info(self):
        # Consumers get ft's own config file (targets, dependencies,
        # ft_add_plugin), found through the package root on CMAKE_PREFIX_PATH.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.builddirs = [""]
        self.cpp_info.includedirs = ["include"]
        self.cpp_info.bindirs = ["bin"]
