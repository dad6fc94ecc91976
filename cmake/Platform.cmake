# Compiler settings shared by every target of the project.
set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_C_STANDARD 11)  # the C programs that test the C API (tests/c/)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(BUILD_SHARED_LIBS ON)  # libtensortier*.so: consumers need none of our private dependencies
set(CMAKE_INSTALL_RPATH "$ORIGIN")  # libtensortier.so finds libtensortier_allocator.so beside it
set(CMAKE_EXPORT_COMPILE_COMMANDS ON)  # for clang-tidy
if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
  set(CMAKE_BUILD_TYPE RelWithDebInfo CACHE STRING "Build type" FORCE)
endif()

# Warnings for our own targets only (third-party headers are SYSTEM includes).
add_library(tensortier_warnings INTERFACE)
# CUDA sources (gpu/src/*.cu) take nvcc's own flags instead (gpu/CMakeLists.txt).
target_compile_options(tensortier_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:C,CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
                             -Wimplicit-fallthrough>
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual>
  $<$<AND:$<COMPILE_LANGUAGE:C,CXX>,$<BOOL:${TENSORTIER_WERROR}>>:-Werror>)

# Sanitized builds are Debug (assertions on) at -O1, as the sanitizers' documentation advises: at
# -O0 the planners run ten times slower under ASan and the suite outgrows CI's time.
if(NOT TENSORTIER_SANITIZE STREQUAL "")
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-O1>)
endif()
if(TENSORTIER_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(TENSORTIER_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT TENSORTIER_SANITIZE STREQUAL "")
  message(FATAL_ERROR "TENSORTIER_SANITIZE='${TENSORTIER_SANITIZE}': use '', 'address' or 'thread'")
endif()
