// Marks a C entry point of a drop-in library: visible, C linkage; the library's version map
// gives it its version.
#pragma once

#define SV_EXPORT extern "C" __attribute__((visibility("default")))
