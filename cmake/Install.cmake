# Installs the libraries, public headers, a CMake package config (find_package(tensortier)) and a
# pkg-config file (pkg-config --cflags --libs tensortier).
include(CMakePackageConfigHelpers)
set(installed_libraries tensortier_allocator tensortier_profiler tensortier_migrator tensortier_runtime)
set(installed_headers allocator/include/ profiler/include/ migrator/include/ runtime/include/)
if(TENSORTIER_GPU_ENABLED)  # the runtime opens GPU tiers through it
  list(APPEND installed_libraries tensortier_gpu)
  list(APPEND installed_headers gpu/include/)
endif()
install(TARGETS ${installed_libraries} EXPORT tensortierTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${installed_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT tensortierTargets NAMESPACE tensortier::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tensortier)
configure_package_config_file(cmake/tensortierConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/tensortierConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tensortier)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/tensortierConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tensortierConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/tensortierConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tensortier)
configure_file(cmake/tensortier.pc.in ${CMAKE_CURRENT_BINARY_DIR}/tensortier.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/tensortier.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
