# Build options. Each one's meaning is its help string.
option(TENSORTIER_WERROR "Treat compiler warnings as errors (CI sets this)" OFF)
option(TENSORTIER_BUILD_TESTS "Build the GoogleTest suite under tests/" ON)
option(TENSORTIER_BUILD_BENCH "Build bench/ (demo and micro-benchmarks)" ON)
set(TENSORTIER_SANITIZE "" CACHE STRING
    "Sanitizer build: empty (none), 'address' (ASan + UBSan) or 'thread' (TSan)")
set_property(CACHE TENSORTIER_SANITIZE PROPERTY STRINGS "" address thread)
