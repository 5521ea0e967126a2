#pragma once
// The library version; CMakeLists.txt reads it from here, so it is stated once.
#define FT_VERSION_MAJOR 0
#define FT_VERSION_MINOR 1
#define FT_VERSION_PATCH 0
#define FT_VERSION_STRING "0.1.0"
