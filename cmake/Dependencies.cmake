# Every dependency is a Debian package (tools/setup.sh installs them), found the way that
# package supports: a CMake config where it ships one, pkg-config IMPORTED_TARGET otherwise.
find_package(PkgConfig REQUIRED)
pkg_check_modules(MEMKIND REQUIRED IMPORTED_TARGET memkind)  # libmemkind-dev
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)      # libhwloc-dev
pkg_check_modules(NUMA REQUIRED IMPORTED_TARGET numa)        # libnuma-dev
pkg_check_modules(PAPI REQUIRED IMPORTED_TARGET papi)        # libpapi-dev (profiler issue)
pkg_check_modules(CBC REQUIRED IMPORTED_TARGET cbc)          # coinor-libcbc-dev: the oracle's exact solver
find_package(Threads REQUIRED)
find_package(TBB CONFIG REQUIRED)            # libtbb-dev (migrator issue)
find_package(dnnl CONFIG REQUIRED)           # libdnnl-dev, oneDNN 2.6 (dnn issue)
find_package(ZLIB REQUIRED)                  # zlib1g-dev: Fashion-MNIST gzip IDX files
find_package(nlohmann_json CONFIG REQUIRED)  # nlohmann-json3-dev
find_package(fmt CONFIG REQUIRED)            # libfmt-dev
find_package(spdlog CONFIG REQUIRED)         # libspdlog-dev
find_package(CLI11 CONFIG REQUIRED)          # libcli11-dev
if(TENSORTIER_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)        # libgtest-dev
endif()
if(TENSORTIER_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)    # libbenchmark-dev
endif()
